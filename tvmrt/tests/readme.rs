//! Every `$ tvmrt ...` command docs/tool.md shows runs as written, from the repository's top folder,
//! and prints what the page shows: exactly, except for timings (numbers on the `load`, `run`,
//! `sum of operators` lines and every number of a profile) and the order of lines (two operators
//! of almost equal time may swap).

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// `(command, expected output lines)` for every `$ tvmrt` line in docs/tool.md's code blocks.
fn examples(readme: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let (mut in_block, mut current) = (false, None);
    for line in readme.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            current = None;
            continue;
        }
        if !in_block {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ tvmrt") {
            out.push((format!("tvmrt{cmd}"), Vec::new()));
            current = Some(out.len() - 1);
        } else if let Some(k) = current {
            out[k].1.push(line.to_string());
        }
    }
    for (_, lines) in &mut out {
        while lines.last().is_some_and(|l| l.is_empty()) {
            lines.pop();
        }
    }
    out
}

/// Timing numbers replaced by `#`; other lines as they are (every line of a profile is timed).
fn normalise(line: &str, profile: bool) -> String {
    let timed = profile
        || ["load ", "run ", "sum of operators"].iter().any(|p| line.starts_with(p))
        || line.split_whitespace().next().is_some_and(|w| w.parse::<f64>().is_ok());
    if !timed {
        return line.trim_end().to_string();
    }
    let mut s = String::new();
    let mut in_number = false;
    for c in line.trim_end().chars() {
        if c.is_ascii_digit() || (in_number && c == '.') {
            if !in_number {
                s.push('#');
            }
            in_number = true;
        } else {
            in_number = false;
            s.push(c);
        }
    }
    // A time's unit follows its magnitude (7 us, 1.2 ms on a loaded machine): the unit goes too.
    let words: Vec<&str> = s.split_whitespace().collect();
    let mut out = Vec::with_capacity(words.len());
    for (i, w) in words.iter().enumerate() {
        let unit = w.trim_end_matches([',', ')', ';']);
        let after_number = i > 0 && words[i - 1] == "#";
        if after_number && ["ns", "us", "ms", "s"].contains(&unit) {
            out.push(w.replacen(unit, "<time>", 1));
        } else {
            out.push(w.to_string());
        }
    }
    out.join(" ")
}

#[test]
fn every_tvmrt_command_in_the_readme_runs_as_shown() {
    let readme = std::fs::read_to_string(repo().join("docs/tool.md")).unwrap();
    let examples = examples(&readme);
    assert!(examples.len() >= 7, "only {} examples found", examples.len());
    // A scratch folder standing in for a fresh clone: the fixtures, and room for the files written.
    let dir = std::env::temp_dir().join(format!("tvmrt-readme-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(repo().join("tests"), dir.join("tests")).unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_tvmrt")).parent().unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    for (cmd, want) in examples {
        let out = Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .current_dir(&dir)
            .env("PATH", &path)
            .env("TVM_NUM_THREADS", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
        let profile = cmd.starts_with("tvmrt profile");
        let got: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(|l| normalise(l, profile)).collect();
        let want: Vec<String> = want.iter().map(|l| normalise(l, profile)).collect();
        let (mut g, mut w) = (got.clone(), want.clone());
        g.sort();
        w.sort();
        assert_eq!(g, w, "{cmd}\n--- docs/tool.md shows:\n{}\n--- it prints:\n{}", want.join("\n"), got.join("\n"));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
