//! Longer fuzzing runs: `cargo run --release --example fuzz -- [params|graph|blob|all] [SECONDS]`.
//! Prints iterations per target; a panicking input is written to target/fuzz-crashes/.

use std::time::{Duration, Instant};
use tvm_runtime::fuzzing::{campaign, seeds, Target};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let which = args.first().map(String::as_str).unwrap_or("all");
    let seconds: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(60);
    let targets: Vec<Target> =
        if which == "all" { Target::ALL.to_vec() } else { Target::parse(which).into_iter().collect() };
    if targets.is_empty() {
        eprintln!("usage: fuzz [params|graph|blob|all] [SECONDS]");
        std::process::exit(2);
    }
    // Errors are expected by the thousand; keep the default panic hook quiet only for those.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for t in targets {
        let corpus = seeds(t, &dir);
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let (mut total, mut accepted, mut round) = (0u64, 0u64, 0u64);
        while Instant::now() < deadline {
            match campaign(t, &corpus, 2000, 0xF00D + round) {
                Ok((n, a)) => {
                    total += n;
                    accepted += a;
                }
                Err(input) => {
                    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-crashes");
                    std::fs::create_dir_all(&out).unwrap();
                    let path = out.join(format!("{}-{round}", t.name()));
                    std::fs::write(&path, input).unwrap();
                    eprintln!("{}: PANIC, input saved to {}", t.name(), path.display());
                    std::process::exit(1);
                }
            }
            round += 1;
        }
        println!(
            "{}: {total} inputs in {seconds} s from {} seeds, {accepted} accepted, no panic",
            t.name(),
            corpus.len()
        );
    }
}
