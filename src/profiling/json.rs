//! A report as upstream's JSON: `AsJSON` writes it (no whitespace; each metric an object naming
//! its kind; numbers with 17 digits after the point), `FromJSON` reads what either library writes
//! (a report crosses RPC this way: `profile_rpc` on the device, `FromJSON` on the host).

use super::{Metric, Metrics, Report};
use crate::error::{Error, Result};
use serde_json::Value;

/// `AsJSON`.
pub fn to_json(report: &Report) -> String {
    let mut out = String::from("{\"calls\":[");
    for (k, call) in report.calls.iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        write_metrics(&mut out, call);
    }
    out.push_str("],\"device_metrics\":{");
    for (k, (device, metrics)) in report.device_metrics.iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        write_string(&mut out, device);
        out.push(':');
        write_metrics(&mut out, metrics);
    }
    out.push_str("},\"configuration\":");
    write_metrics(&mut out, &report.configuration);
    out.push('}');
    out
}

fn write_metrics(out: &mut String, metrics: &Metrics) {
    out.push('{');
    for (k, (name, value)) in metrics.iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        write_string(out, name);
        out.push_str(":{");
        match value {
            Metric::Str(s) => {
                out.push_str("\"string\":");
                write_string(out, s);
            }
            Metric::Count(c) => out.push_str(&format!("\"count\":{c}")),
            Metric::Duration(d) => out.push_str(&format!("\"microseconds\":{d:.17}")),
            Metric::Percent(p) => out.push_str(&format!("\"percent\":{p:.17}")),
            Metric::Ratio(r) => out.push_str(&format!("\"ratio\":{r:.17}")),
        }
        out.push('}');
    }
    out.push('}');
}

/// A JSON string. Upstream writes strings as they are (a quote in a name breaks its JSON); the
/// escapes written here are the ones its reader accepts, so both read what this writes.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `FromJSON`: the top-level keys `calls`, `device_metrics` and `configuration` (each may be left
/// out), every metric an object with exactly one kind.
pub fn from_json(text: &str) -> Result<Report> {
    let value: Value = serde_json::from_str(text).map_err(|e| Error::value(format!("a report's JSON: {e}")))?;
    let top = value.as_object().ok_or_else(|| Error::value("a report's JSON must be an object"))?;
    let mut report = Report::default();
    for (key, v) in top {
        match key.as_str() {
            "calls" => {
                let calls = v.as_array().ok_or_else(|| Error::value("a report's \"calls\" must be an array"))?;
                report.calls = calls.iter().map(metrics).collect::<Result<_>>()?;
            }
            "device_metrics" => {
                let devices =
                    v.as_object().ok_or_else(|| Error::value("a report's \"device_metrics\" must be an object"))?;
                report.device_metrics =
                    devices.iter().map(|(d, m)| Ok((d.clone(), metrics(m)?))).collect::<Result<_>>()?;
            }
            "configuration" => report.configuration = metrics(v)?,
            other => {
                return Err(Error::value(format!(
                    "a report's JSON has a key '{other}': only calls, device_metrics and configuration"
                )))
            }
        }
    }
    Ok(report)
}

fn metrics(v: &Value) -> Result<Metrics> {
    let map = v.as_object().ok_or_else(|| Error::value("report metrics must be a JSON object"))?;
    map.iter().map(|(name, m)| Ok((name.clone(), metric(name, m)?))).collect()
}

fn metric(name: &str, v: &Value) -> Result<Metric> {
    let kind = v
        .as_object()
        .filter(|o| o.len() == 1)
        .and_then(|o| o.iter().next())
        .ok_or_else(|| Error::value(format!("metric '{name}' must be an object with exactly one kind")))?;
    let number =
        |k: &str| kind.1.as_f64().ok_or_else(|| Error::value(format!("metric '{name}': \"{k}\" must be a number")));
    Ok(match kind.0.as_str() {
        "microseconds" => Metric::Duration(number("microseconds")?),
        "percent" => Metric::Percent(number("percent")?),
        "ratio" => Metric::Ratio(number("ratio")?),
        "count" => Metric::Count(
            kind.1.as_i64().ok_or_else(|| Error::value(format!("metric '{name}': \"count\" must be an integer")))?,
        ),
        "string" => Metric::Str(
            kind.1
                .as_str()
                .ok_or_else(|| Error::value(format!("metric '{name}': \"string\" must be a string")))?
                .to_string(),
        ),
        other => {
            return Err(Error::value(format!(
                "Cannot parse metric of type {other} valid types are microseconds, percent, count."
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profiling::format::tests::sample;

    #[test]
    fn writes_upstreams_json() {
        let want = concat!(
            r#"{"calls":[{"Count":{"count":1},"Duration (us)":{"microseconds":12.50000000000000000},"Name":{"string":"add"},"#,
            r#""Argument Shapes":{"string":"float32[4], float32[4]"}},{"Percent":{"percent":75.00000000000000000},"Count":"#,
            r#"{"count":2},"Duration (us)":{"microseconds":1234567.89100000006146729},"Name":{"string":"mul"}}],"#,
            r#""device_metrics":{"cpu0":{"Duration (us)":{"microseconds":50.00000000000000000},"Name":{"string":"Total"}}},"#,
            r#""configuration":{"Executor":{"string":"Graph"}}}"#
        );
        assert_eq!(to_json(&sample()), want);
    }

    #[test]
    fn reads_back_what_it_writes_in_any_key_order() {
        let back = from_json(&to_json(&sample())).unwrap();
        let sorted = |mut m: Metrics| {
            m.sort_by(|a, b| a.0.cmp(&b.0));
            m
        };
        let original = sample();
        assert_eq!(back.calls.len(), 2);
        for (a, b) in back.calls.iter().zip(&original.calls) {
            assert_eq!(sorted(a.clone()), sorted(b.clone()));
        }
        assert_eq!(back.device_metrics[0].0, "cpu0");
        assert_eq!(back.configuration, original.configuration);
        // Whitespace, missing parts, escapes.
        let r = from_json(" { \"calls\" : [ { \"Name\" : { \"string\" : \"a\\\"b\" } } ] } ").unwrap();
        assert_eq!(r.calls[0][0].1, Metric::Str("a\"b".into()));
        assert!(r.device_metrics.is_empty() && r.configuration.is_empty());
    }

    #[test]
    fn malformed_reports_are_errors() {
        for bad in [
            "[]",
            "{\"calls\":{}}",
            "{\"calls\":[{\"a\":{\"bytes\":1}}]}",
            "{\"calls\":[{\"a\":{\"count\":1.5}}]}",
            "{\"calls\":[{\"a\":{\"count\":1,\"ratio\":2}}]}",
            "{\"other\":{}}",
            "{\"calls\":[",
        ] {
            assert!(from_json(bad).is_err(), "{bad}");
        }
        let e = from_json("{\"configuration\":{\"x\":{\"bytes\":1}}}").unwrap_err().to_string();
        assert!(e.contains("Cannot parse metric of type bytes"), "{e}");
    }
}
