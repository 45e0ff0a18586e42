//! JUnit XML: the report format CI systems read to show which test failed (GitLab's
//! `artifacts:reports:junit`, Jenkins, Buildkite, GitHub test reporters). A sweep
//! writes one `<testsuite>` per spec, one `<testcase>` per point and engine.
//!
//! The shape follows the Jenkins xUnit plugin's `junit-10.xsd` (the schema the tests
//! validate against): `<testsuites>` ⊃ `<testsuite name tests failures errors skipped
//! time timestamp hostname>` ⊃ `<properties>` and `<testcase name classname time>`,
//! each case holding at most one `<failure message type>` or `<skipped message>`.

use std::fmt::Write as _;

/// How one test case ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Compared and right.
    Passed,
    /// Compared and wrong, or could not produce a result: `message` is the one-line
    /// reason (the `message` attribute), `detail` the body (first differing position,
    /// the run's error).
    Failed {
        /// The `type` attribute: what kind of failure (`mismatch`, `failed_run`, …).
        kind: String,
        message: String,
        detail: String,
    },
    /// Not run, with the reason (`n/a`, below the floor, …).
    Skipped { reason: String },
}

/// One `<testcase>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// `classname`: the spec (and engine) the case belongs to.
    pub classname: String,
    /// `name`: the point.
    pub name: String,
    /// `time`, seconds (non-finite or negative values are written as 0).
    pub time_s: f64,
    pub outcome: Outcome,
}

/// One `<testsuite>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Suite {
    pub name: String,
    /// RFC 3339 time the suite started.
    pub timestamp: String,
    pub hostname: Option<String>,
    /// `<properties>`: name → value (spec hash, model identity, verdict line, …).
    pub properties: Vec<(String, String)>,
    pub cases: Vec<Case>,
}

/// The XML document for `suites` (UTF-8, with the XML declaration).
pub fn render(suites: &[Suite]) -> String {
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let count = |f: fn(&Outcome) -> bool| -> usize {
        suites
            .iter()
            .flat_map(|x| &x.cases)
            .filter(|c| f(&c.outcome))
            .count()
    };
    let total_time: f64 = suites
        .iter()
        .flat_map(|x| &x.cases)
        .map(|c| secs(c.time_s))
        .sum();
    let _ = writeln!(
        s,
        "<testsuites tests=\"{}\" failures=\"{}\" errors=\"0\" time=\"{total_time:.3}\">",
        suites.iter().map(|x| x.cases.len()).sum::<usize>(),
        count(|o| matches!(o, Outcome::Failed { .. })),
    );
    for suite in suites {
        let failures = suite
            .cases
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Failed { .. }))
            .count();
        let skipped = suite
            .cases
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Skipped { .. }))
            .count();
        let time: f64 = suite.cases.iter().map(|c| secs(c.time_s)).sum();
        let _ = write!(
            s,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"{time:.3}\" timestamp=\"{}\"",
            attr(&suite.name),
            suite.cases.len(),
            attr(&suite.timestamp),
        );
        if let Some(h) = &suite.hostname {
            let _ = write!(s, " hostname=\"{}\"", attr(h));
        }
        s.push_str(">\n");
        if !suite.properties.is_empty() {
            s.push_str("    <properties>\n");
            for (k, v) in &suite.properties {
                let _ = writeln!(
                    s,
                    "      <property name=\"{}\" value=\"{}\"/>",
                    attr(k),
                    attr(v)
                );
            }
            s.push_str("    </properties>\n");
        }
        for c in &suite.cases {
            let _ = write!(
                s,
                "    <testcase name=\"{}\" classname=\"{}\" time=\"{:.3}\"",
                attr(&c.name),
                attr(&c.classname),
                secs(c.time_s)
            );
            match &c.outcome {
                Outcome::Passed => s.push_str("/>\n"),
                Outcome::Failed {
                    kind,
                    message,
                    detail,
                } => {
                    let _ = writeln!(
                        s,
                        ">\n      <failure type=\"{}\" message=\"{}\">{}</failure>\n    </testcase>",
                        attr(kind),
                        attr(message),
                        text(detail)
                    );
                }
                Outcome::Skipped { reason } => {
                    let _ = writeln!(
                        s,
                        ">\n      <skipped message=\"{}\"/>\n    </testcase>",
                        attr(reason)
                    );
                }
            }
        }
        s.push_str("  </testsuite>\n");
    }
    s.push_str("</testsuites>\n");
    s
}

fn secs(t: f64) -> f64 {
    if t.is_finite() && t > 0.0 {
        t
    } else {
        0.0
    }
}

/// Characters XML 1.0 cannot hold at all (C0 controls but tab, newline and carriage
/// return; U+FFFE, U+FFFF) become U+FFFD.
fn legal(c: char) -> char {
    match c {
        '\t' | '\n' | '\r' => c,
        '\u{0}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}' => '\u{fffd}',
        _ => c,
    }
}

/// Escaped for a double-quoted attribute (newlines kept as character references, so a
/// reader does not normalise them to spaces).
fn attr(v: &str) -> String {
    let mut o = String::with_capacity(v.len());
    for c in v.chars().map(legal) {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\n' => o.push_str("&#10;"),
            '\r' => o.push_str("&#13;"),
            '\t' => o.push_str("&#9;"),
            c => o.push(c),
        }
    }
    o
}

/// Escaped for element text.
fn text(v: &str) -> String {
    let mut o = String::with_capacity(v.len());
    for c in v.chars().map(legal) {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suite_renders_as_written_by_hand() {
        let suite = Suite {
            name: "default".into(),
            timestamp: "2026-12-01T14:00:00Z".into(),
            hostname: Some("vm".into()),
            properties: vec![("spec_sha256".into(), "ab\"c".into())],
            cases: vec![
                Case {
                    classname: "default.memdial".into(),
                    name: "floor direct".into(),
                    time_s: 1.5,
                    outcome: Outcome::Passed,
                },
                Case {
                    classname: "default.memdial".into(),
                    name: "50% <mmap>".into(),
                    time_s: f64::NAN,
                    outcome: Outcome::Failed {
                        kind: "mismatch".into(),
                        message: "ids differ at 3\nfrom the reference".into(),
                        detail: "ids 1 & 2\u{1}".into(),
                    },
                },
                Case {
                    classname: "default.memdial".into(),
                    name: "1KiB".into(),
                    time_s: 0.25,
                    outcome: Outcome::Skipped {
                        reason: "below the floor".into(),
                    },
                },
            ],
        };
        let want = concat!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
            "<testsuites tests=\"3\" failures=\"1\" errors=\"0\" time=\"1.750\">\n",
            "  <testsuite name=\"default\" tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"1\" time=\"1.750\" timestamp=\"2026-12-01T14:00:00Z\" hostname=\"vm\">\n",
            "    <properties>\n",
            "      <property name=\"spec_sha256\" value=\"ab&quot;c\"/>\n",
            "    </properties>\n",
            "    <testcase name=\"floor direct\" classname=\"default.memdial\" time=\"1.500\"/>\n",
            "    <testcase name=\"50% &lt;mmap&gt;\" classname=\"default.memdial\" time=\"0.000\">\n",
            "      <failure type=\"mismatch\" message=\"ids differ at 3&#10;from the reference\">ids 1 &amp; 2\u{fffd}</failure>\n",
            "    </testcase>\n",
            "    <testcase name=\"1KiB\" classname=\"default.memdial\" time=\"0.250\">\n",
            "      <skipped message=\"below the floor\"/>\n",
            "    </testcase>\n",
            "  </testsuite>\n",
            "</testsuites>\n",
        );
        assert_eq!(render(&[suite]), want);
    }
}
