//! The timing method and the table.
//!
//! Method: each contender is calibrated to a batch of `n` iterations lasting about one
//! sample time, warmed up, then sampled `SAMPLES` times. Samples of the contenders of one
//! workload are **interleaved** (round-robin, rotating who goes first), so that load from
//! other processes on a shared machine falls on ours and the peers alike; each figure is the
//! median of its samples, per iteration.
//!
//! A ratio is the **median of the per-round ratios** (ours / peer in each round, both
//! sampled moments apart), printed with the range of those ratios: this machine switches
//! between regimes (cheap and dear cache-line transfers, fast and slow wake-ups) for
//! seconds to minutes, and a round sits in one regime. A narrow range says the run saw one
//! regime; a wide one shows both, and the median says which the run mostly saw.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::workloads::Workload;

/// Sample times of one run.
pub struct Settings {
    /// Sample time for nanosecond-scale workloads.
    pub fast: Duration,
    /// Sample time for pool workloads.
    pub slow: Duration,
    /// Whether the Java peers run.
    pub java: bool,
}

/// Samples per contender.
pub const SAMPLES: usize = 21;

/// A contender: runs `n` iterations of its workload and returns how long they took.
pub struct Contender<'a> {
    pub name: String,
    run: Box<dyn FnMut(u64) -> Duration + 'a>,
}

/// A contender timed by the harness around a loop of `f`.
pub fn each<'a>(name: impl Into<String>, mut f: impl FnMut() + 'a) -> Contender<'a> {
    timed(name, move |n| {
        let start = Instant::now();
        for _ in 0..n {
            f();
        }
        start.elapsed()
    })
}

/// A contender that runs `n` iterations itself (spreading them over threads, say) and
/// returns the elapsed time.
pub fn timed<'a>(name: impl Into<String>, run: impl FnMut(u64) -> Duration + 'a) -> Contender<'a> {
    Contender {
        name: name.into(),
        run: Box::new(run),
    }
}

/// A contender's result.
#[derive(Clone, Debug)]
pub struct Measured {
    pub name: String,
    /// Median nanoseconds per iteration.
    pub ns: f64,
    /// Fastest and slowest sample, nanoseconds per iteration.
    pub min: f64,
    pub max: f64,
    /// Every sample, nanoseconds per iteration, in round order.
    pub rounds: Vec<f64>,
}

/// Times every contender of one workload, interleaving their samples.
pub fn measure(sample_time: Duration, contenders: Vec<Contender<'_>>) -> Vec<Measured> {
    let mut contenders = contenders;
    let mut batches = Vec::with_capacity(contenders.len());
    for c in &mut contenders {
        batches.push(calibrate(c, sample_time));
    }
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(SAMPLES); contenders.len()];
    for round in 0..SAMPLES {
        for k in 0..contenders.len() {
            let i = (round + k) % contenders.len();
            let n = batches[i];
            let elapsed = (contenders[i].run)(n);
            samples[i].push(elapsed.as_nanos() as f64 / n as f64);
        }
    }
    contenders
        .iter()
        .zip(samples)
        .map(|(c, rounds)| {
            let mut s = rounds.clone();
            s.sort_by(f64::total_cmp);
            Measured {
                name: c.name.clone(),
                ns: s[s.len() / 2],
                min: s[0],
                max: s[s.len() - 1],
                rounds,
            }
        })
        .collect()
}

/// The result of the contender named `name`.
pub fn find<'a>(results: &'a [Measured], name: &str) -> &'a Measured {
    results
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no result named {name}"))
}

/// Finds a batch size lasting about `sample_time`; the calibration runs double as warm-up
/// (at least ~2 sample times).
fn calibrate(c: &mut Contender<'_>, sample_time: Duration) -> u64 {
    let mut n = 1u64;
    let mut spent = Duration::ZERO;
    loop {
        let elapsed = (c.run)(n);
        spent += elapsed;
        if elapsed >= sample_time / 4 && spent >= sample_time * 2 {
            let per_iter = elapsed.as_nanos() as f64 / n as f64;
            return ((sample_time.as_nanos() as f64 / per_iter) as u64).max(1);
        }
        if elapsed < sample_time / 4 {
            n = n.saturating_mul(2);
        }
    }
}

/// One line of the table.
pub struct Row {
    /// The workload that measured it: the table is ordered by it.
    pub workload: Workload,
    /// What the row compares, within its workload.
    pub title: String,
    pub ours: Cell,
    pub peer: Cell,
    pub target: String,
}

/// A table cell: a label with a figure, or a label with a reason there is no figure.
pub struct Cell {
    pub label: String,
    pub value: Option<f64>,
    pub unit: Unit,
    /// Appended after the figure (e.g. an allocation count).
    pub note: String,
    /// The figure of each round, in round order, when the workload alternated its
    /// contenders in rounds (empty otherwise, e.g. for the Java peers).
    pub rounds: Vec<f64>,
}

#[derive(Clone, Copy)]
pub enum Unit {
    /// Nanoseconds per operation, printed as ns or µs.
    Nanos,
    /// Kibibytes.
    KiB,
}

impl Cell {
    pub fn of(m: &Measured) -> Cell {
        Cell::nanos(m.name.clone(), m.ns).with_rounds(m.rounds.clone())
    }

    pub fn nanos(label: impl Into<String>, ns: f64) -> Cell {
        Cell::value(label, ns, Unit::Nanos)
    }

    pub fn value(label: impl Into<String>, value: f64, unit: Unit) -> Cell {
        Cell {
            label: label.into(),
            value: Some(value),
            unit,
            note: String::new(),
            rounds: Vec::new(),
        }
    }

    pub fn missing(label: impl Into<String>, why: impl Into<String>) -> Cell {
        Cell {
            label: label.into(),
            value: None,
            unit: Unit::Nanos,
            note: why.into(),
            rounds: Vec::new(),
        }
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Cell {
        self.note = note.into();
        self
    }

    /// The figure of each round, for the per-round ratios of [`Ratio::of`].
    pub fn with_rounds(mut self, rounds: Vec<f64>) -> Cell {
        self.rounds = rounds;
        self
    }

    fn render(&self) -> String {
        let mut s = self.label.clone();
        match self.value {
            Some(v) => {
                let _ = write!(s, ": **{}**", format_value(v, self.unit));
                if !self.note.is_empty() {
                    let _ = write!(s, " ({})", self.note);
                }
            }
            None => {
                let _ = write!(s, ": {}", self.note);
            }
        }
        s
    }
}

pub fn format_value(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Nanos if v >= 10_000_000.0 => format!("{:.1} ms", v / 1e6),
        Unit::Nanos if v >= 1_000_000.0 => format!("{:.2} ms", v / 1e6),
        Unit::Nanos if v >= 10_000.0 => format!("{:.1} µs", v / 1000.0),
        Unit::Nanos if v >= 1000.0 => format!("{:.2} µs", v / 1000.0),
        Unit::Nanos if v >= 100.0 => format!("{v:.0} ns"),
        Unit::Nanos => format!("{v:.1} ns"),
        Unit::KiB => format!("{v:+.0} KiB"),
    }
}

/// A row's ratio of ours to the peer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ratio {
    /// The median of the per-round ratios, or the ratio of the medians when the cells have
    /// no rounds to pair (or one round each).
    pub median: f64,
    /// The lowest and highest per-round ratio.
    pub range: Option<(f64, f64)>,
}

impl Ratio {
    /// Ours / peer, round by round when both have the same rounds.
    pub fn of(ours: &Cell, peer: &Cell) -> Option<Ratio> {
        let (a, b) = (ours.value?, peer.value?);
        if !matches!(ours.unit, Unit::Nanos) || b <= 0.0 {
            return None;
        }
        let paired = ours.rounds.len() > 1 && ours.rounds.len() == peer.rounds.len();
        if !paired {
            return Some(Ratio {
                median: a / b,
                range: None,
            });
        }
        let mut per_round: Vec<f64> = ours
            .rounds
            .iter()
            .zip(&peer.rounds)
            .map(|(a, b)| a / b)
            .collect();
        per_round.sort_by(f64::total_cmp);
        let n = per_round.len();
        let median = if n % 2 == 1 {
            per_round[n / 2]
        } else {
            (per_round[n / 2 - 1] + per_round[n / 2]) / 2.0
        };
        Some(Ratio {
            median,
            range: Some((per_round[0], per_round[n - 1])),
        })
    }
}

impl std::fmt::Display for Ratio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2}×", self.median)?;
        if let Some((low, high)) = self.range {
            write!(f, " ({low:.2}–{high:.2})")?;
        }
        Ok(())
    }
}

impl Row {
    /// Whether this row meets a target of the form `≤ N×` (the median per-round ratio) or
    /// `≤ N ns` (ours).
    fn met(&self) -> Option<bool> {
        let bound = self.target.strip_prefix('≤')?.trim();
        let number = |s: &str| s.trim().parse::<f64>().ok();
        let ours = self.ours.value?;
        if let Some(ratio) = bound.strip_suffix('×') {
            return Some(Ratio::of(&self.ours, &self.peer)?.median <= number(ratio)?);
        }
        let ns = bound.split(',').next()?.strip_suffix("ns")?;
        Some(ours <= number(ns)?)
    }

    fn ratio(&self) -> String {
        Ratio::of(&self.ours, &self.peer).map_or("–".to_string(), |r| r.to_string())
    }
}

/// The table as Markdown: every row, in workload order.
pub fn render_table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str("| workload | ours | peer | ratio (range over rounds) | target |\n");
    out.push_str("|---|---|---|---|---|\n");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} {} | {} | {} | {} | {} |",
            r.workload.heading(),
            r.title,
            r.ours.render(),
            r.peer.render(),
            r.ratio(),
            r.target
        );
    }
    out
}

/// The headline table: the rows that have a target, with whether this run meets it
/// (for a ratio target `≤ N×` and a time target `≤ N ns`; other targets are left to the
/// reader). Short labels: the full table above names every contender.
pub fn render_headline(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str("| row | ours | peer | ratio (range over rounds) | target | met |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for r in rows.iter().filter(|r| r.target.starts_with('≤')) {
        let value = |c: &Cell| c.value.map_or("–".to_string(), |v| format_value(v, c.unit));
        // The peer's name beside its figure: one workload may have a target against two.
        let peer = match r.peer.value {
            Some(_) => format!("{} ({})", value(&r.peer), r.peer.label),
            None => value(&r.peer),
        };
        let _ = writeln!(
            out,
            "| {} {}: {} | {} | {} | {} | {} | {} |",
            r.workload.heading(),
            r.title,
            r.ours.label,
            value(&r.ours),
            peer,
            r.ratio(),
            r.target,
            r.met().map_or("", |met| if met { "yes" } else { "no" })
        );
    }
    out
}

/// A workload's contenders, printed as they finish (the table comes at the end).
pub fn report(workload: &str, results: &[Measured]) {
    for m in results {
        eprintln!(
            "  {workload:<34} {:<52} median {:>10}  [{} .. {}]",
            m.name,
            format_value(m.ns, Unit::Nanos),
            format_value(m.min, Unit::Nanos),
            format_value(m.max, Unit::Nanos)
        );
    }
}
