//! Where pool threads run: upstream's affinity modes (`threading::Configure`,
//! `runtime.config_threadpool`). Big cores are those of the highest maximum frequency, little ones
//! those of the lowest; on a machine whose cores are all alike every core is both, so a request
//! for little cores still runs, on all of them.

use crate::error::{Error, Result};

/// Upstream's `ThreadGroup::AffinityMode`; any other value is the default (no pinning).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Default,
    Big,
    Little,
    /// Thread `i` runs on the `i`-th listed core.
    OneCorePerThread,
    /// Every thread may run on any listed core.
    ShareAllCores,
}

impl Mode {
    pub fn from_code(code: i64) -> Mode {
        match code {
            1 => Mode::Big,
            -1 => Mode::Little,
            -2 => Mode::OneCorePerThread,
            -3 => Mode::ShareAllCores,
            _ => Mode::Default,
        }
    }
}

/// The cores a configuration uses and how threads spread over them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// Empty: threads are not pinned.
    pub cores: Vec<usize>,
    /// Thread `i` on `cores[i % len]`, else every thread on all of `cores`.
    pub one_per_thread: bool,
}

impl Placement {
    /// The cores thread `id` may run on (empty: anywhere).
    pub fn cores_of(&self, id: usize) -> Vec<usize> {
        match (self.cores.is_empty(), self.one_per_thread) {
            (true, _) => Vec::new(),
            (false, true) => vec![self.cores[id % self.cores.len()]],
            (false, false) => self.cores.clone(),
        }
    }
}

/// Logical cores with their maximum frequencies (0 when the kernel does not say).
fn core_frequencies() -> Vec<(usize, u64)> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    (0..n)
        .map(|cpu| {
            let path = format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq/cpuinfo_max_freq");
            (cpu, std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0))
        })
        .collect()
}

/// The cores of `mode`: the listed ones for the two modes that take a list, else those of the
/// highest (big) or lowest (little) maximum frequency, in core order. Only those two read sysfs.
pub fn cores_for(mode: Mode, listed: &[usize]) -> Result<Vec<usize>> {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(&bad) = listed.iter().find(|&&c| c >= available.max(libc::CPU_SETSIZE as usize)) {
        return Err(Error::value(format!("core {bad} does not exist")));
    }
    let pick = |fastest: bool| {
        let freqs = core_frequencies();
        let want = if fastest { freqs.iter().map(|f| f.1).max() } else { freqs.iter().map(|f| f.1).min() };
        freqs.iter().filter(|f| Some(f.1) == want).map(|f| f.0).collect()
    };
    Ok(match mode {
        Mode::Default => Vec::new(),
        Mode::Big => pick(true),
        Mode::Little => pick(false),
        Mode::OneCorePerThread | Mode::ShareAllCores => listed.to_vec(),
    })
}

/// Pins the calling thread to `cores` (nothing when empty). Failure (a core outside the
/// process's allowed set) leaves the thread where it was: placement is a preference.
pub fn pin_current_thread(cores: &[usize]) {
    if cores.is_empty() {
        return;
    }
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes inside it for indices below
    // CPU_SETSIZE (checked); sched_setaffinity reads the set we pass for this thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cores.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_pick_cores() {
        let big = cores_for(Mode::Big, &[]).unwrap();
        let little = cores_for(Mode::Little, &[]).unwrap();
        assert!(!big.is_empty() && !little.is_empty());
        assert_eq!(cores_for(Mode::OneCorePerThread, &[0, 0]).unwrap(), vec![0, 0]);
        assert!(cores_for(Mode::ShareAllCores, &[100_000]).is_err());
        assert!(cores_for(Mode::Default, &[]).unwrap().is_empty());
        let p = Placement { cores: vec![3, 5], one_per_thread: true };
        assert_eq!((p.cores_of(0), p.cores_of(1), p.cores_of(2)), (vec![3], vec![5], vec![3]));
        let p = Placement { cores: vec![3, 5], one_per_thread: false };
        assert_eq!(p.cores_of(7), vec![3, 5]);
        assert!(Placement::default().cores_of(0).is_empty());
    }
}
