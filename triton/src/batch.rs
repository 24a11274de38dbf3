//! Rows of several requests laid over runs of the builds: which builds serve a number of rows at
//! the least cost, which rows of which request each run takes, and the byte copies between
//! requests' (possibly fragmented) buffers and a run's tensors.

/// The builds (indices into `costs`, each serving `batches[i]` rows a run) that serve `rows` rows
/// at the least total cost, the last one padded if need be. Every build is a candidate.
pub fn plan(batches: &[usize], costs: &[f64], rows: usize) -> Vec<usize> {
    // best[r]: the cheapest runs that serve r rows.
    let mut best: Vec<(f64, Vec<usize>)> = vec![(0.0, Vec::new())];
    for r in 1..=rows {
        let mut choice: Option<(f64, Vec<usize>)> = None;
        for (i, (&b, &c)) in batches.iter().zip(costs).enumerate() {
            let (cost, used) = &best[r.saturating_sub(b.max(1))];
            let total = cost + c;
            if choice.as_ref().is_none_or(|(t, _)| total < *t) {
                let mut runs = used.clone();
                runs.push(i);
                choice = Some((total, runs));
            }
        }
        best.push(choice.expect("at least one build"));
    }
    best.swap_remove(rows).1
}

/// One run's share of a request: `take` of its rows from row `first`, at row `at` of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub request: usize,
    pub first: usize,
    pub at: usize,
    pub take: usize,
}

/// The requests' rows (in order) laid over runs of `batch_of_run[k]` rows each.
pub fn spans(rows: &[usize], batch_of_run: &[usize]) -> Vec<Vec<Span>> {
    let mut queue = rows.iter().enumerate().filter(|(_, &r)| r > 0).map(|(i, _)| (i, 0usize)).peekable();
    let mut current = queue.next();
    batch_of_run
        .iter()
        .map(|&batch| {
            let mut run = Vec::new();
            let mut at = 0;
            while let Some((i, first)) = current {
                if at == batch {
                    break;
                }
                let take = (rows[i] - first).min(batch - at);
                run.push(Span { request: i, first, at, take });
                at += take;
                current = if first + take == rows[i] { queue.next() } else { Some((i, first + take)) };
            }
            run
        })
        .collect()
}

/// Copies `dst.len()` bytes starting at byte `start` of the concatenation of `pieces`.
pub fn copy_from_pieces(pieces: &[&[u8]], mut start: usize, dst: &mut [u8]) -> bool {
    let mut written = 0;
    for p in pieces {
        if start >= p.len() {
            start -= p.len();
            continue;
        }
        let n = (p.len() - start).min(dst.len() - written);
        dst[written..written + n].copy_from_slice(&p[start..start + n]);
        written += n;
        start = 0;
        if written == dst.len() {
            return true;
        }
    }
    written == dst.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cheapest_runs() {
        // b1 costs 1, b8 costs 3: eight rows are one b8 run, three rows three b1 runs, four a b8.
        let (batches, costs) = ([1, 8], [1.0, 3.0]);
        assert_eq!(plan(&batches, &costs, 8), vec![1]);
        assert_eq!(plan(&batches, &costs, 3), vec![0, 0, 0]);
        assert_eq!(plan(&batches, &costs, 4), vec![1]);
        assert_eq!(plan(&batches, &costs, 9), vec![1, 0]);
        assert_eq!(plan(&batches, &costs, 0), Vec::<usize>::new());
        // A single build serves everything, padding the last run.
        assert_eq!(plan(&[4], &[1.0], 9), vec![0, 0, 0]);
    }

    #[test]
    fn rows_over_runs() {
        let s = spans(&[3, 0, 6], &[4, 4, 1]);
        assert_eq!(
            s,
            vec![
                vec![Span { request: 0, first: 0, at: 0, take: 3 }, Span { request: 2, first: 0, at: 3, take: 1 }],
                vec![Span { request: 2, first: 1, at: 0, take: 4 }],
                vec![Span { request: 2, first: 5, at: 0, take: 1 }],
            ]
        );
        // Runs larger than the rows left are padded: their spans end early.
        assert_eq!(spans(&[2], &[8]), vec![vec![Span { request: 0, first: 0, at: 0, take: 2 }]]);
    }

    #[test]
    fn copies_across_pieces() {
        let (a, b, c) = ([0u8, 1, 2], [3u8], [4u8, 5, 6, 7]);
        let pieces: [&[u8]; 3] = [&a, &b, &c];
        let mut dst = [0u8; 4];
        assert!(copy_from_pieces(&pieces, 2, &mut dst));
        assert_eq!(dst, [2, 3, 4, 5]);
        let mut all = [0u8; 8];
        assert!(copy_from_pieces(&pieces, 0, &mut all));
        assert_eq!(all, [0, 1, 2, 3, 4, 5, 6, 7]);
        // Starting in a later piece: the earlier ones are skipped by their lengths.
        let mut later = [0u8; 3];
        assert!(copy_from_pieces(&pieces, 4, &mut later));
        assert_eq!(later, [4, 5, 6]);
        let mut past = [0u8; 2];
        assert!(!copy_from_pieces(&pieces, 7, &mut past));
    }
}
