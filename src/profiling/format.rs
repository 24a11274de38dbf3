//! A report as upstream prints it: `AsTable(sort, aggregate, col_sums)` and `AsCSV`, with its
//! rows, columns, aggregation, sorting, sums and number formats, so the same model profiled on
//! either library gives tables that differ only in the measured numbers.

use super::{metric, set, Metric, Metrics, Report};
use crate::error::{Error, Result};

/// Columns every table has, in this order; the other metrics follow by name.
const FIXED_COLUMNS: [&str; 6] = ["Name", "Duration (us)", "Percent", "Device", "Count", "Argument Shapes"];

/// `AsTable`: one row per call, or per aggregated call (`aggregate`: calls of one function, or one
/// hash, with the same argument shapes on the same device); longest first (`sort`); a row of
/// sums (`col_sums`); a row per device's totals; then the configuration.
pub fn table(report: &Report, sort: bool, aggregate: bool, col_sums: bool) -> Result<String> {
    let mut rows = if aggregate { aggregated(&report.calls) } else { report.calls.clone() };
    if sort {
        let duration = |row: &Metrics| match metric(row, "Duration (us)") {
            Some(Metric::Duration(d)) => Ok(*d),
            _ => Err(Error::value("a call without \"Duration (us)\" cannot be sorted by it")),
        };
        let keys = rows.iter().map(duration).collect::<Result<Vec<f64>>>()?;
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by(|&a, &b| keys[b].total_cmp(&keys[a]));
        rows = order.into_iter().map(|i| rows[i].clone()).collect();
    }
    if col_sums {
        let sums = column_sums(&rows);
        rows.push(vec![("Name".into(), Metric::Str("----------".into()))]);
        let mut sum_row = vec![("Name".into(), Metric::Str("Sum".into()))];
        sum_row.extend(sums);
        rows.push(sum_row);
    }
    for (_, metrics) in &report.device_metrics {
        let mut row = metrics.clone();
        set(&mut row, "Name", Metric::Str("Total".into()));
        rows.push(row);
    }
    let mut others: Vec<&str> =
        rows.iter().flat_map(|r| r.iter().map(|(n, _)| n.as_str())).filter(|n| !FIXED_COLUMNS.contains(n)).collect();
    others.sort_unstable();
    others.dedup();
    let columns: Vec<&str> = FIXED_COLUMNS.iter().copied().chain(others).collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| columns.iter().map(|c| metric(row, c).map(table_cell).unwrap_or_default()).collect())
        .collect();
    let widths: Vec<usize> = (0..columns.len())
        .map(|k| cells.iter().map(|r| r[k].len()).chain([columns[k].len()]).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        for (k, cell) in cells.enumerate() {
            // The first column left-aligned, the others right-aligned; two spaces after each.
            if k == 0 {
                out.push_str(&format!("{cell:<w$}  ", w = widths[k]));
            } else {
                out.push_str(&format!("{cell:>w$}  ", w = widths[k]));
            }
        }
        out.push('\n');
    };
    line(&mut columns.iter().copied());
    for row in &cells {
        line(&mut row.iter().map(String::as_str));
    }
    out.push_str("\nConfiguration\n-------------\n");
    for (name, value) in &report.configuration {
        out.push_str(&format!("{name}: {}\n", table_cell(value)));
    }
    Ok(out)
}

/// What calls are aggregated by: (hash or name, argument shapes, device).
type GroupKey = (String, String, String);

/// Calls grouped by (hash or name, argument shapes, device): durations, counts and percents
/// summed, ratios averaged, strings kept where all agree (else empty); groups in order of their
/// first call.
fn aggregated(calls: &[Metrics]) -> Vec<Metrics> {
    let key = |c: &Metrics| {
        let text = |n: &str| match metric(c, n) {
            Some(Metric::Str(s)) => s.clone(),
            Some(other) => table_cell(other),
            None => String::new(),
        };
        let name = if metric(c, "Hash").is_some() { text("Hash") } else { text("Name") };
        (name, text("Argument Shapes"), text("Device"))
    };
    let mut groups: Vec<(GroupKey, Vec<&Metrics>)> = Vec::new();
    for c in calls {
        let k = key(c);
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, members)) => members.push(c),
            None => groups.push((k, vec![c])),
        }
    }
    groups
        .into_iter()
        .map(|(_, members)| {
            let mut names: Vec<&str> = Vec::new();
            for m in &members {
                for (n, _) in m.iter() {
                    if !names.contains(&n.as_str()) {
                        names.push(n);
                    }
                }
            }
            names.into_iter().map(|n| (n.to_string(), combine(members.iter().filter_map(|m| metric(m, n))))).collect()
        })
        .collect()
}

/// One aggregated value of a metric from the calls that have it.
fn combine<'a>(values: impl Iterator<Item = &'a Metric>) -> Metric {
    let values: Vec<&Metric> = values.collect();
    match values[0] {
        Metric::Duration(_) => Metric::Duration(values.iter().map(|v| number(v)).sum()),
        Metric::Percent(_) => Metric::Percent(values.iter().map(|v| number(v)).sum()),
        Metric::Count(_) => Metric::Count(values.iter().map(|v| if let Metric::Count(c) = v { *c } else { 0 }).sum()),
        Metric::Ratio(_) => Metric::Ratio(values.iter().map(|v| number(v)).sum::<f64>() / values.len() as f64),
        Metric::Str(first) => {
            let same = values.iter().all(|v| matches!(v, Metric::Str(s) if s == first));
            Metric::Str(if same { first.clone() } else { String::new() })
        }
    }
}

fn number(m: &Metric) -> f64 {
    match m {
        Metric::Duration(v) | Metric::Percent(v) | Metric::Ratio(v) => *v,
        Metric::Count(c) => *c as f64,
        Metric::Str(_) => 0.0,
    }
}

/// Per column, the sum of its counts, durations and percents over `rows` (ratios and strings are
/// not summed), in the order columns first appear.
fn column_sums(rows: &[Metrics]) -> Metrics {
    let mut sums: Metrics = Vec::new();
    for (name, value) in rows.iter().flatten() {
        let add = match value {
            Metric::Duration(_) | Metric::Percent(_) | Metric::Count(_) => value,
            Metric::Ratio(_) | Metric::Str(_) => continue,
        };
        match sums.iter_mut().find(|(n, _)| n == name) {
            Some((_, total)) => {
                *total = match (&*total, add) {
                    (Metric::Count(a), Metric::Count(b)) => Metric::Count(a + b),
                    (Metric::Duration(a), b) => Metric::Duration(a + number(b)),
                    (Metric::Percent(a), b) => Metric::Percent(a + number(b)),
                    (t, _) => t.clone(),
                }
            }
            None => sums.push((name.clone(), add.clone())),
        }
    }
    sums
}

/// A table cell: counts as integers, durations and percents with two decimals, ratios to two
/// significant digits; counts, durations and ratios grouped by thousands as the user's locale
/// does (upstream formats them with `std::locale("")`; here English locales group with commas,
/// others print plain digits, as the C locale).
pub fn table_cell(m: &Metric) -> String {
    match m {
        Metric::Count(c) => group_thousands(&c.to_string(), locale_groups()),
        Metric::Duration(d) => group_thousands(&format!("{d:.2}"), locale_groups()),
        Metric::Percent(p) => format!("{p:.2}"),
        Metric::Ratio(r) => group_thousands(&general(*r, 2), locale_groups()),
        Metric::Str(s) => s.clone(),
    }
}

/// Whether numbers are grouped by thousands: the user's locale (LC_ALL, else LC_NUMERIC, else
/// LANG) is an English one.
fn locale_groups() -> bool {
    static GROUPS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *GROUPS.get_or_init(|| {
        let locale = ["LC_ALL", "LC_NUMERIC", "LANG"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
            .unwrap_or_default();
        locale.starts_with("en_")
    })
}

/// `number` with its integer digits grouped by three with commas, when `groups`.
fn group_thousands(number: &str, groups: bool) -> String {
    if !groups || number.contains('e') {
        return number.to_string();
    }
    let (sign, rest) = number.strip_prefix('-').map_or(("", number), |r| ("-", r));
    let (int, frac) = rest.split_once('.').map_or((rest, None), |(i, f)| (i, Some(f)));
    let mut grouped = String::new();
    for (k, ch) in int.chars().enumerate() {
        if k > 0 && (int.len() - k) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(ch);
    }
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

/// A number as C++ streams print it by default (`%g`): `precision` significant digits, trailing
/// zeros dropped, an exponent below 1e-4 or from 10^precision on.
pub fn general(x: f64, precision: usize) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let precision = precision.max(1);
    let sci = format!("{:.*e}", precision - 1, x);
    let (mantissa, exp) = sci.split_once('e').expect("an exponent");
    let exp: i32 = exp.parse().expect("a number");
    let trim =
        |s: &str| if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s.into() };
    if exp < -4 || exp >= precision as i32 {
        format!("{}e{}{:02}", trim(mantissa), if exp < 0 { '-' } else { '+' }, exp.abs())
    } else {
        trim(&format!("{:.*}", (precision as i32 - 1 - exp) as usize, x))
    }
}

/// `AsCSV`: the calls only; a header of every metric name, sorted; numbers as C++ streams print
/// them, strings quoted as they are.
pub fn csv(report: &Report) -> String {
    let mut names: Vec<&str> = report.calls.iter().flat_map(|c| c.iter().map(|(n, _)| n.as_str())).collect();
    names.sort_unstable();
    names.dedup();
    let mut out = names.join(",");
    out.push('\n');
    for call in &report.calls {
        let cells: Vec<String> = names
            .iter()
            .map(|n| match metric(call, n) {
                None => String::new(),
                Some(Metric::Count(c)) => c.to_string(),
                Some(Metric::Duration(v) | Metric::Percent(v) | Metric::Ratio(v)) => general(*v, 6),
                Some(Metric::Str(s)) => format!("\"{s}\""),
            })
            .collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The report PROFILING.md captured from upstream: two calls, a device's total, one setting.
    pub(crate) fn sample() -> Report {
        let s = |v: &str| Metric::Str(v.into());
        Report {
            calls: vec![
                vec![
                    ("Count".into(), Metric::Count(1)),
                    ("Duration (us)".into(), Metric::Duration(12.5)),
                    ("Name".into(), s("add")),
                    ("Argument Shapes".into(), s("float32[4], float32[4]")),
                ],
                vec![
                    ("Percent".into(), Metric::Percent(75.0)),
                    ("Count".into(), Metric::Count(2)),
                    ("Duration (us)".into(), Metric::Duration(1234567.891)),
                    ("Name".into(), s("mul")),
                ],
            ],
            device_metrics: vec![(
                "cpu0".into(),
                vec![("Duration (us)".into(), Metric::Duration(50.0)), ("Name".into(), s("Total"))],
            )],
            configuration: vec![("Executor".into(), s("Graph"))],
        }
    }

    #[test]
    fn the_table_is_upstreams() {
        if locale_groups() {
            return;
        }
        let want = "Name        Duration (us)  Percent  Device  Count         Argument Shapes  \n\
                    mul            1234567.89    75.00              2                          \n\
                    add                 12.50                       1  float32[4], float32[4]  \n\
                    ----------                                                                 \n\
                    Sum            1234580.39    75.00              3                          \n\
                    Total               50.00                                                  \n\
                    \n\
                    Configuration\n\
                    -------------\n\
                    Executor: Graph\n";
        assert_eq!(table(&sample(), true, true, true).unwrap(), want);
    }

    #[test]
    fn unsorted_unaggregated_rows_keep_execution_order() {
        let t = table(&sample(), false, false, false).unwrap();
        let names: Vec<&str> = t.lines().skip(1).take(3).map(|l| l.split_whitespace().next().unwrap()).collect();
        assert_eq!(names, ["add", "mul", "Total"]);
        // A row without a duration cannot be sorted.
        let mut r = sample();
        r.calls[0].retain(|(n, _)| n != "Duration (us)");
        assert!(table(&r, true, false, false).is_err());
        assert!(table(&r, false, false, true).is_ok());
    }

    #[test]
    fn aggregation_sums_averages_and_keeps_common_strings() {
        let call = |name: &str, hash: &str, us: f64, ratio: f64| {
            vec![
                ("Name".to_string(), Metric::Str(name.into())),
                ("Hash".to_string(), Metric::Str(hash.into())),
                ("Duration (us)".to_string(), Metric::Duration(us)),
                ("Count".to_string(), Metric::Count(1)),
                ("Percent".to_string(), Metric::Percent(us / 10.0)),
                ("Flops".to_string(), Metric::Ratio(ratio)),
                ("Device".to_string(), Metric::Str("cpu0".into())),
            ]
        };
        let calls = vec![call("f", "h1", 3.0, 1.0), call("g", "h1", 5.0, 3.0), call("f", "h2", 1.0, 0.5)];
        let rows = aggregated(&calls);
        assert_eq!(rows.len(), 2);
        assert_eq!(metric(&rows[0], "Name"), Some(&Metric::Str(String::new())), "two names under one hash");
        assert_eq!(metric(&rows[0], "Duration (us)"), Some(&Metric::Duration(8.0)));
        assert_eq!(metric(&rows[0], "Count"), Some(&Metric::Count(2)));
        assert_eq!(metric(&rows[0], "Percent"), Some(&Metric::Percent(0.8)));
        assert_eq!(metric(&rows[0], "Flops"), Some(&Metric::Ratio(2.0)));
        assert_eq!(metric(&rows[0], "Device"), Some(&Metric::Str("cpu0".into())));
        assert_eq!(metric(&rows[1], "Name"), Some(&Metric::Str("f".into())));
        let sums = column_sums(&rows);
        assert_eq!(metric(&sums, "Count"), Some(&Metric::Count(3)));
        assert_eq!(metric(&sums, "Flops"), None, "ratios are not summed");
        assert_eq!(metric(&sums, "Name"), None);
    }

    #[test]
    fn numbers_print_as_cpp_streams_print_them() {
        assert_eq!(general(12.5, 6), "12.5");
        assert_eq!(general(2.0, 6), "2");
        assert_eq!(general(1.305_768, 6), "1.30577");
        assert_eq!(general(1234567.891, 6), "1.23457e+06");
        assert_eq!(general(0.000_012_3, 6), "1.23e-05");
        assert_eq!(general(0.0001, 6), "0.0001");
        assert_eq!(general(0.31, 2), "0.31");
        assert_eq!(general(1.5, 2), "1.5");
        assert_eq!(general(123.0, 2), "1.2e+02");
        assert_eq!(general(99.96, 2), "1e+02");
        assert_eq!((general(0.0, 6), general(-2.5, 6)), ("0".into(), "-2.5".into()));
        assert_eq!(group_thousands("1234567.89", true), "1,234,567.89");
        assert_eq!(group_thousands("-1234", true), "-1,234");
        assert_eq!(group_thousands("123", true), "123");
        assert_eq!(group_thousands("1234567.89", false), "1234567.89");
        assert_eq!(group_thousands("1.2e+05", true), "1.2e+05");
    }

    #[test]
    fn the_csv_is_upstreams() {
        let want = "Argument Shapes,Count,Duration (us),Name,Percent\n\
                    \"float32[4], float32[4]\",1,12.5,\"add\",\n\
                    ,2,1.23457e+06,\"mul\",75\n";
        assert_eq!(csv(&sample()), want);
    }
}
