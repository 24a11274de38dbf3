//! Mutation fuzzing of the three readers that take untrusted bytes: the params blob, the graph
//! JSON (with storage planning) and the module blob. No nightly toolchain is needed: seeds come
//! from the fixtures, mutations are the classic byte-level ones plus length and count fields set
//! to extreme values. A panic is a bug; errors are the expected outcome.
//!
//! `tests/fuzz.rs` replays the seeds and a fixed number of mutations in the normal test command;
//! `cargo run --release --example fuzz -- TARGET SECONDS` runs longer.

#![forbid(unsafe_code)]

use crate::graph::Graph;
use crate::library::{blob, LibraryModule};
use crate::memory_plan::StoragePlan;
use std::panic::{catch_unwind, AssertUnwindSafe};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Params,
    Graph,
    Blob,
}

impl Target {
    pub const ALL: [Target; 3] = [Target::Params, Target::Graph, Target::Blob];

    pub fn name(self) -> &'static str {
        match self {
            Target::Params => "params",
            Target::Graph => "graph",
            Target::Blob => "blob",
        }
    }

    pub fn parse(s: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == s)
    }

    /// Feeds one input; returns whether the reader accepted it. Panics are the caller's to catch.
    pub fn run(self, data: &[u8]) -> bool {
        match self {
            Target::Params => crate::params::parse(data).is_ok(),
            Target::Graph => match std::str::from_utf8(data).ok().map(Graph::parse) {
                Some(Ok(g)) => StoragePlan::new(&g).is_ok(),
                _ => false,
            },
            Target::Blob => blob::load_tree(data, LibraryModule::empty()).is_ok(),
        }
    }
}

/// xorshift64*: reproducible, no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

const INTERESTING_U64: [u64; 8] = [0, 1, 2, 0x7f, 0x8000_0000, u32::MAX as u64, 1 << 40, u64::MAX];

/// One to four mutations of `seed`.
pub fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut d = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = d.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                d[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                d[i] = [0u8, 0xff, 0x7f, 0x80, b'"', b'[', b'-', b'9'][rng.below(8)];
            }
            2 => d.truncate(rng.below(len + 1)),
            3 if len >= 8 => {
                // A length or count field: dmlc streams put them on 8-byte boundaries.
                let i = rng.below(len / 8) * 8;
                let v = INTERESTING_U64[rng.below(INTERESTING_U64.len())];
                d[i..i + 8].copy_from_slice(&v.to_le_bytes());
            }
            4 if len > 0 => {
                let (a, b) = (rng.below(len), rng.below(len));
                let (lo, hi) = (a.min(b), a.max(b).min(lo_plus(a.min(b), 64)));
                let chunk = d[lo..hi].to_vec();
                let at = rng.below(len);
                d.splice(at..at, chunk);
            }
            5 if len > 0 => {
                let i = rng.below(len);
                d.remove(i);
            }
            6 => {
                let n = 1 + rng.below(16);
                d.extend((0..n).map(|_| rng.next_u64() as u8));
            }
            _ if len > 0 => {
                // A decimal number in JSON text becomes an extreme one.
                let i = rng.below(len);
                if d[i].is_ascii_digit() {
                    let v = ["-1", "99999999999999999999", "4294967296", "0"][rng.below(4)];
                    d.splice(i..i + 1, v.bytes());
                }
            }
            _ => {}
        }
    }
    d
}

fn lo_plus(lo: usize, n: usize) -> usize {
    lo.saturating_add(n)
}

/// Runs `iterations` mutations of the seeds (round robin); returns the first input that panicked.
pub fn campaign(target: Target, seeds: &[Vec<u8>], iterations: u64, seed: u64) -> Result<(u64, u64), Vec<u8>> {
    let mut rng = Rng::new(seed);
    let mut accepted = 0;
    for s in seeds {
        check(target, s)?;
    }
    for i in 0..iterations {
        let input = mutate(&seeds[(i as usize) % seeds.len()], &mut rng);
        if check(target, &input)? {
            accepted += 1;
        }
    }
    Ok((iterations, accepted))
}

fn check(target: Target, input: &[u8]) -> Result<bool, Vec<u8>> {
    catch_unwind(AssertUnwindSafe(|| target.run(input))).map_err(|_| input.to_vec())
}

/// The seed corpus of a target, from the committed fixtures in `dir`.
pub fn seeds(target: Target, dir: &std::path::Path) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut models: Vec<_> =
        std::fs::read_dir(dir).map(|r| r.filter_map(|e| e.ok()).map(|e| e.path()).collect()).unwrap_or_default();
    models.sort();
    for m in models {
        match target {
            Target::Params => out.extend(std::fs::read(m.join("params.bin"))),
            Target::Graph => out.extend(std::fs::read(m.join("graph.json"))),
            Target::Blob => {
                let lib = m.join("lib.so");
                if lib.exists() {
                    if let Ok(b) = crate::library::read_module_blob(&lib.to_string_lossy()) {
                        // Big blobs (bound weights) slow every iteration down; the small ones cover
                        // the same code.
                        if b.len() < 64 * 1024 {
                            out.push(b);
                        }
                    }
                }
            }
        }
    }
    out
}
