//! What became of one run: the `status` column of `results.csv`.

use serde::{Deserialize, Serialize};

/// The outcome of one run slot (the `status` column, serialised as the lower-case
/// names below). Outcomes are added at the end of the list; the names are never
/// changed (baselines, merges and resumes read them back).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RunStatus {
    /// The run finished and its metrics were read (`ok`).
    #[serde(rename = "ok")]
    Ok,
    /// Non-zero exit, killed by a signal, or unreadable metrics (`failed`).
    #[default]
    #[serde(rename = "failed")]
    Failed,
    /// Exit code 2: below the engine's floor or a usage error (`refused`).
    #[serde(rename = "refused")]
    Refused,
    /// Killed after the spec's `timeout_s` (`timeout`).
    #[serde(rename = "timeout")]
    Timeout,
    /// Not run: the budget resolved below the planned floor (`below_floor`).
    #[serde(rename = "below_floor")]
    BelowFloor,
    /// Not run: the engine cannot run this point, e.g. a resident-only engine under
    /// the model size (`n/a`).
    #[serde(rename = "n/a")]
    NotApplicable,
}

impl RunStatus {
    /// The name in `results.csv`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Ok => "ok",
            RunStatus::Failed => "failed",
            RunStatus::Refused => "refused",
            RunStatus::Timeout => "timeout",
            RunStatus::BelowFloor => "below_floor",
            RunStatus::NotApplicable => "n/a",
        }
    }

    /// Parses a name of `results.csv` (`None` for an unknown one).
    pub fn parse(s: &str) -> Option<RunStatus> {
        use RunStatus::*;
        [Ok, Failed, Refused, Timeout, BelowFloor, NotApplicable]
            .into_iter()
            .find(|v| v.as_str() == s)
    }

    /// The slot is settled: it finished, or it is not to be run (below the floor,
    /// not applicable). A resumed sweep runs every other slot again.
    pub fn is_settled(self) -> bool {
        matches!(
            self,
            RunStatus::Ok | RunStatus::BelowFloor | RunStatus::NotApplicable
        )
    }

    /// The run was attempted and did not finish: it fails the verdict.
    pub fn is_failure(self) -> bool {
        !self.is_settled()
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The serialised names are the `status` values of earlier `results.csv` files.
    #[test]
    fn names_round_trip() {
        for (v, s) in [
            (RunStatus::Ok, "ok"),
            (RunStatus::Failed, "failed"),
            (RunStatus::Refused, "refused"),
            (RunStatus::Timeout, "timeout"),
            (RunStatus::BelowFloor, "below_floor"),
            (RunStatus::NotApplicable, "n/a"),
        ] {
            assert_eq!(serde_json::to_value(v).unwrap(), serde_json::json!(s));
            assert_eq!(serde_json::from_value::<RunStatus>(s.into()).unwrap(), v);
            assert_eq!(RunStatus::parse(s), Some(v));
        }
        assert_eq!(RunStatus::parse("bogus"), None);
    }
}
