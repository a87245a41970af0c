//! Refusals logged at a bounded rate, without I/O: the first of a quiet spell in full, then at most
//! one summary per period with the counts by kind and the busiest source addresses. However many
//! strangers knock, a listener writes a line every few seconds, not one per knock.

use crate::machine::Source;
use crate::refusal::Refusal;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// The first refusal after a quiet spell: log it in full.
    First {
        /// Its kind.
        kind: Refusal,
        /// Its source.
        source: Source,
    },
    /// The refusals since the last line.
    Summary(Summary),
}

/// Refusals over a period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// How long they were counted over.
    pub over: Duration,
    /// Counts by kind (kinds with none left out), in the order of [`Refusal::ALL`], each with the
    /// last detail said of it (what an operator fixing a client's token needs to read).
    pub kinds: Vec<(Refusal, u64, String)>,
    /// The busiest sources, busiest first (at most [`limits::REFUSAL_SOURCES_NAMED`]).
    pub busiest: Vec<(Source, u64)>,
    /// Sources counted but not named.
    pub other_sources: usize,
    /// Refusals from sources past [`limits::REFUSAL_SOURCES_MAX`]: in the counts by kind, under no
    /// source.
    pub untracked: u64,
}

impl Summary {
    /// All refusals counted.
    pub fn total(&self) -> u64 {
        self.kinds.iter().map(|(_, n, _)| n).sum()
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} connections refused in the last {:.0} s (", self.total(), self.over.as_secs_f64())?;
        for (i, (k, n, last)) in self.kinds.iter().enumerate() {
            write!(f, "{}{k} {n}", if i > 0 { ", " } else { "" })?;
            if !last.is_empty() {
                write!(f, " (last: {last})")?;
            }
        }
        f.write_str("); busiest sources: ")?;
        for (i, (s, n)) in self.busiest.iter().enumerate() {
            write!(f, "{}{s} {n}", if i > 0 { ", " } else { "" })?;
        }
        if self.other_sources > 0 {
            write!(f, " and {} more", self.other_sources)?;
        }
        if self.untracked > 0 {
            write!(f, " (+{} refusals from sources past the {} kept)", self.untracked, limits::REFUSAL_SOURCES_MAX)?;
        }
        Ok(())
    }
}

/// A period in which refusals are counted rather than logged one by one.
#[derive(Debug)]
struct Period {
    since: Instant,
    kinds: [u64; Refusal::ALL.len()],
    last: [String; Refusal::ALL.len()],
    sources: HashMap<Source, u64>,
    /// Refusals from sources beyond [`limits::REFUSAL_SOURCES_MAX`] (counted, not by source).
    untracked: u64,
}

impl Period {
    fn new(since: Instant) -> Period {
        Period { since, kinds: Default::default(), last: Default::default(), sources: HashMap::new(), untracked: 0 }
    }
}

/// Longest detail a summary repeats.
pub const DETAIL_CHARS_MAX: usize = 200;

/// The limiter. Quiet until a refusal; that one is logged, and a period starts in which refusals
/// are counted; at its end a summary is logged if any were counted (and another period starts),
/// else it is quiet again.
#[derive(Debug)]
pub struct RefusalLog {
    every: Duration,
    period: Option<Period>,
}

impl RefusalLog {
    /// A limiter that sums up at most once per `every`.
    pub fn new(every: Duration) -> RefusalLog {
        RefusalLog { every, period: None }
    }

    /// A refusal of `kind` from `source` at `now`, `detail` saying how (our own text, cut at
    /// [`DETAIL_CHARS_MAX`]): what to log, if anything.
    pub fn refused(&mut self, kind: Refusal, source: Source, detail: &str, now: Instant) -> Option<Line> {
        let summary = self.tick(now);
        let Some(p) = self.period.as_mut() else {
            self.period = Some(Period::new(now));
            return Some(Line::First { kind, source });
        };
        p.kinds[kind.index()] += 1;
        if !detail.is_empty() {
            p.last[kind.index()] = detail.chars().take(DETAIL_CHARS_MAX).collect();
        }
        if let Some(n) = p.sources.get_mut(&source) {
            *n += 1;
        } else if p.sources.len() < limits::REFUSAL_SOURCES_MAX {
            p.sources.insert(source, 1);
        } else {
            p.untracked += 1;
        }
        summary.map(Line::Summary)
    }

    /// Time passed: the summary due at `now`, if one is.
    pub fn tick(&mut self, now: Instant) -> Option<Summary> {
        let p = self.period.as_mut()?;
        let over = now.saturating_duration_since(p.since);
        if over < self.every {
            return None;
        }
        if p.kinds.iter().all(|n| *n == 0) {
            self.period = None;
            return None;
        }
        let mut done = std::mem::replace(p, Period::new(now));
        let mut sources: Vec<(Source, u64)> = done.sources.into_iter().collect();
        sources.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let other_sources = sources.len().saturating_sub(limits::REFUSAL_SOURCES_NAMED);
        sources.truncate(limits::REFUSAL_SOURCES_NAMED);
        let kinds = Refusal::ALL.iter().map(|k| (*k, done.kinds[k.index()], std::mem::take(&mut done.last[k.index()]))).filter(|(_, n, _)| *n > 0).collect();
        Some(Summary { over, kinds, busiest: sources, other_sources, untracked: done.untracked })
    }

    /// When the next summary may be due (`None`: quiet).
    pub fn next_due(&self) -> Option<Instant> {
        self.period.as_ref().map(|p| p.since + self.every)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    const EVERY: Duration = Duration::from_secs(5);

    fn ip(n: u8) -> Source {
        Source::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)))
    }

    #[test]
    fn a_flood_is_one_line_then_one_summary_per_period() {
        let (mut log, t) = (RefusalLog::new(EVERY), Instant::now());
        let mut lines = Vec::new();
        // 10 000 refusals a second for 30 s, from 20 addresses, one of them busier.
        for i in 0..300_000u32 {
            let now = t + Duration::from_micros(u64::from(i) * 100);
            let source = if i % 2 == 0 { ip(1) } else { ip(2 + (i % 19) as u8) };
            let kind = if i % 3 == 0 { Refusal::Deadline } else { Refusal::Displaced };
            lines.extend(log.refused(kind, source, "", now));
        }
        lines.extend(log.tick(t + Duration::from_secs(31)).map(Line::Summary));
        assert_eq!(lines[0], Line::First { kind: Refusal::Deadline, source: ip(1) });
        assert!((6..=8).contains(&lines.len()), "{} lines", lines.len());
        let summaries: Vec<&Summary> = lines.iter().filter_map(|l| if let Line::Summary(s) = l { Some(s) } else { None }).collect();
        // Every refusal is in a line: the first, or a summary.
        assert_eq!(1 + summaries.iter().map(|s| s.total()).sum::<u64>(), 300_000);
        let s = summaries[0];
        assert_eq!(s.busiest[0].0, ip(1));
        assert_eq!((s.busiest.len(), s.other_sources), (limits::REFUSAL_SOURCES_NAMED, 19 - limits::REFUSAL_SOURCES_NAMED + 1));
        assert_eq!(s.kinds.iter().map(|k| k.0).collect::<Vec<_>>(), vec![Refusal::Displaced, Refusal::Deadline]);
        assert!(s.kinds.iter().all(|k| k.2.is_empty()));
        let text = s.to_string();
        assert!(text.contains("displaced ") && text.contains("10.0.0.1 "), "{text}");
    }

    #[test]
    fn after_a_quiet_period_the_next_refusal_is_logged_in_full_again() {
        let (mut log, t) = (RefusalLog::new(EVERY), Instant::now());
        assert!(matches!(log.refused(Refusal::Auth, ip(1), "sent no token", t), Some(Line::First { .. })));
        assert_eq!(log.refused(Refusal::Auth, ip(1), "presented a wrong token", t + Duration::from_secs(1)), None);
        assert_eq!(log.next_due(), Some(t + EVERY));
        let s = log.tick(t + EVERY).expect("a summary of the second");
        assert_eq!((s.total(), s.over), (1, EVERY));
        // The summary says what the last of each kind was: a client's wrong token is not lost in it.
        assert!(s.to_string().contains("auth 1 (last: presented a wrong token)"), "{s}");
        // A period with nothing counted ends the spell: quiet, and the next one is a first again.
        assert_eq!(log.tick(t + EVERY * 2), None);
        assert_eq!(log.next_due(), None);
        assert_eq!(log.refused(Refusal::Closed, ip(2), "", t + EVERY * 3), Some(Line::First { kind: Refusal::Closed, source: ip(2) }));
    }

    #[test]
    fn sources_beyond_the_bound_are_counted_but_not_kept() {
        let (mut log, t) = (RefusalLog::new(EVERY), Instant::now());
        log.refused(Refusal::Closed, Source::Local, "", t);
        for i in 0..(limits::REFUSAL_SOURCES_MAX as u32 + 500) {
            let source = Source::Ip(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)));
            log.refused(Refusal::Closed, source, "", t);
        }
        let s = log.tick(t + EVERY).unwrap();
        assert_eq!(s.total(), limits::REFUSAL_SOURCES_MAX as u64 + 500);
        assert_eq!(s.other_sources, limits::REFUSAL_SOURCES_MAX - limits::REFUSAL_SOURCES_NAMED);
        assert_eq!(s.untracked, 500, "the sources past the bound are summed, not lost");
        assert!(s.to_string().contains("+500 refusals from sources past"), "{s}");
    }
}
