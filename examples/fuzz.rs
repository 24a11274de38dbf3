//! Longer fuzzing runs, with overflow checks and debug assertions on:
//! `cargo run --profile fuzz --example fuzz -- [params|graph|blob|rpc|handshake|tracker|tar|all] [SECONDS]`.
//! Prints iterations per target; a panicking input is written to target/fuzz-crashes/.

use std::time::{Duration, Instant};
use tvm_runtime::fuzzing::{Corpus, Target};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("replay") {
        return replay(&args[1..]);
    }
    let which = args.first().map(String::as_str).unwrap_or("all");
    let seconds: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(60);
    let targets: Vec<Target> =
        if which == "all" { Target::ALL.to_vec() } else { Target::parse(which).into_iter().collect() };
    if targets.is_empty() {
        eprintln!("usage: fuzz [params|graph|blob|rpc|handshake|tracker|tar|all] [SECONDS]");
        std::process::exit(2);
    }
    // Errors are expected by the thousand; panics are reported once, with the input saved.
    std::panic::set_hook(Box::new(|info| eprintln!("panic: {info}")));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for t in targets {
        let corpus = Corpus::load(t, &dir);
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let (mut total, mut accepted, mut round) = (0u64, 0u64, 0u64);
        while Instant::now() < deadline {
            match corpus.campaign(2000, 0xF00D + round) {
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
            corpus.seeds.len()
        );
    }
}

/// `fuzz replay TARGET FILE`: runs one saved input against every seed's model (a crash that is not
/// a panic ends the process; run this under valgrind or gdb to see where).
fn replay(args: &[String]) {
    let (Some(t), Some(file)) = (args.first().and_then(|t| Target::parse(t)), args.get(1)) else {
        eprintln!("usage: fuzz replay [params|graph|blob|rpc|handshake|tracker|tar] FILE");
        std::process::exit(2);
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let corpus = Corpus::load(t, &dir);
    let input = std::fs::read(file).expect("the input file");
    for k in 0..corpus.seeds.len() {
        let accepted = corpus.run(k, &input);
        println!("seed {k}: {}", if accepted { "accepted" } else { "refused" });
    }
}
