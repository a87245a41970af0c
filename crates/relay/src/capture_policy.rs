//! When the relay takes its first snapshot (`--capture`).

/// When the relay takes its first snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CapturePolicy {
    /// When the relay starts, so the first agent finds it ready (the master forks even if nobody
    /// comes).
    #[default]
    OnStart,
    /// When the first agent asks (nothing is forked or held until someone needs it).
    OnDemand,
}

impl std::str::FromStr for CapturePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<CapturePolicy, String> {
        match s {
            "on-start" => Ok(CapturePolicy::OnStart),
            "on-demand" => Ok(CapturePolicy::OnDemand),
            s => Err(format!("--capture {s:?}: expected on-start or on-demand")),
        }
    }
}

impl std::fmt::Display for CapturePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CapturePolicy::OnStart => "on-start",
            CapturePolicy::OnDemand => "on-demand",
        })
    }
}
