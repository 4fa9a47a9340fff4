//! Cells of measurements, their medians, the markdown tables and the SVG charts.

use std::{fmt::Write as _, path::Path, time::Duration};

use plotters::prelude::*;

use crate::methods::Family;
use crate::probe::DiskCounters;
use eagerio::core::DevicePrice;

/// One verified, timed run.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub elapsed: Duration,
    pub rows: usize,
    /// Bytes delivered: rows x row size.
    pub useful: u64,
    pub reads: Option<u64>,
    /// Time inside the gather call (the caller's thread), where the method has one.
    pub call: Option<Duration>,
    /// The gap the gather was planned with, where the method says.
    pub gap: Option<u64>,
    pub disk: Option<DiskCounters>,
    pub major_faults: u64,
    /// Growth of the table's resident pages over the run (mincore), bytes.
    pub cache_growth: i64,
    pub peak_rss: u64,
}

impl Sample {
    pub fn rows_per_s(&self) -> f64 {
        self.rows as f64 / self.elapsed.as_secs_f64()
    }
}

/// All runs of one method in one configuration.
#[derive(Debug, Clone)]
pub struct Cell {
    /// Values of the table's leading columns.
    pub params: Vec<String>,
    /// Cells with the same group are compared with each other (best baseline).
    pub group: String,
    pub method: String,
    pub family: Family,
    pub samples: Vec<Sample>,
    /// Why the cell is FAILED (a wrong byte or an error); a failed cell shows no time.
    pub failed: Option<String>,
    /// The disk's price fitted in the cell's round.
    pub price: Option<DevicePrice>,
}

impl Cell {
    pub fn new(params: Vec<String>, group: String, method: String, family: Family) -> Cell {
        Cell { params, group, method, family, samples: Vec::new(), failed: None, price: None }
    }

    pub fn priced(self, price: Option<DevicePrice>) -> Cell {
        Cell { price, ..self }
    }

    /// The median run by time (the upper one for an even count); its counters are reported.
    pub fn median(&self) -> Option<&Sample> {
        if self.failed.is_some() || self.samples.is_empty() {
            return None;
        }
        let mut v: Vec<&Sample> = self.samples.iter().collect();
        v.sort_by_key(|s| s.elapsed);
        Some(v[v.len() / 2])
    }

    pub fn rows_per_s(&self) -> Option<f64> {
        self.median().map(Sample::rows_per_s)
    }

    /// What the median run's plan (its device reads and bytes) costs the disk.
    pub fn plan_price(&self) -> Option<Duration> {
        let d = self.median()?.disk?;
        Some(self.price?.of(d.reads, d.bytes()))
    }

    /// The plan's price over the median run's time: 1.00x runs the plan at the disk's limit.
    pub fn vs_price(&self) -> Option<f64> {
        Some(self.plan_price()?.as_secs_f64() / self.median()?.elapsed.as_secs_f64())
    }
}

/// The best baseline's median rows/s in `group`.
pub fn best_baseline(cells: &[Cell], group: &str) -> Option<f64> {
    cells
        .iter()
        .filter(|c| c.group == group && c.family == Family::Baseline)
        .filter_map(Cell::rows_per_s)
        .max_by(f64::total_cmp)
}

fn mb(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / 1e6)
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |x| x.to_string())
}

/// A markdown table of gather cells. `params` names the leading columns.
pub fn gather_table(params: &[&str], cells: &[Cell]) -> String {
    let mut s = String::new();
    let head = [
        "method",
        "median ms",
        "in call ms",
        "rows/s",
        "useful MB/s",
        "gap B",
        "reads issued",
        "device reads",
        "device MB",
        "major faults",
        "page cache +MB",
        "peak RSS +MB",
        "vs best baseline",
        "plan price ms",
        "vs price",
    ];
    let cols: Vec<&str> = params.iter().copied().chain(head).collect();
    let _ = writeln!(s, "| {} |", cols.join(" | "));
    let aligns: Vec<&str> =
        cols.iter().enumerate().map(|(i, _)| if i == params.len() { "---" } else { "---:" }).collect();
    let _ = writeln!(s, "|{}|", aligns.join("|"));
    for c in cells {
        let mut row: Vec<String> = c.params.clone();
        row.push(c.method.clone());
        match (c.median(), &c.failed) {
            (Some(m), _) => {
                let rps = m.rows_per_s();
                row.push(format!("{:.1}", m.elapsed.as_secs_f64() * 1e3));
                row.push(m.call.map_or_else(|| "-".into(), |c| format!("{:.2}", c.as_secs_f64() * 1e3)));
                row.push(format!("{rps:.0}"));
                row.push(format!("{:.1}", m.useful as f64 / 1e6 / m.elapsed.as_secs_f64()));
                row.push(opt(m.gap));
                row.push(opt(m.reads));
                row.push(opt(m.disk.map(|d| d.reads)));
                row.push(m.disk.map_or_else(|| "-".into(), |d| mb(d.bytes())));
                row.push(m.major_faults.to_string());
                row.push(format!("{:.1}", m.cache_growth as f64 / 1e6));
                row.push(mb(m.peak_rss));
                row.push(best_baseline(cells, &c.group).map_or_else(|| "-".into(), |b| format!("{:.2}x", rps / b)));
                row.push(c.plan_price().map_or_else(|| "-".into(), |p| format!("{:.1}", p.as_secs_f64() * 1e3)));
                row.push(c.vs_price().map_or_else(|| "-".into(), |x| format!("{x:.2}x")));
            }
            (None, Some(_)) => row.extend(std::iter::repeat_n("FAILED".to_string(), head.len() - 1)),
            (None, None) => row.extend(std::iter::repeat_n("-".to_string(), head.len() - 1)),
        }
        let _ = writeln!(s, "| {} |", row.join(" | "));
    }
    s
}

/// Colors for the charts' series, stable by index.
fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    C[i % C.len()]
}

fn log_bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.filter(|v| *v > 0.0).fold((f64::MAX, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if hi == 0.0 {
        return (1.0, 10.0);
    }
    (10f64.powf(lo.log10().floor()), 10f64.powf(hi.log10().ceil()).max(lo * 10.0))
}

type ChartResult = Result<(), String>;

/// Grouped bars on a log axis: one group per label, one bar per series (missing or failed: none).
pub fn bar_chart(path: &Path, title: &str, groups: &[String], series: &[(String, Vec<Option<f64>>)]) -> ChartResult {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let root = SVGBackend::new(path, (1100, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let (lo, hi) = log_bounds(series.iter().flat_map(|(_, v)| v.iter().flatten().copied()));
    let hi = hi * 10.0; // a decade of headroom keeps the legend clear of the bars
    let n = groups.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..n, (lo..hi).log_scale())
        .map_err(|x| e(&x))?;
    let label_of = |x: &f64| {
        let i = x.floor();
        if (x - i - 0.5).abs() < 1e-6 && (i as usize) < groups.len() {
            groups[i as usize].clone()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&label_of)
        .y_desc("rows/s (median, log scale)")
        .draw()
        .map_err(|x| e(&x))?;
    let width = 0.8 / series.len().max(1) as f64;
    for (si, (name, values)) in series.iter().enumerate() {
        let c = color(si);
        let bars = values.iter().enumerate().filter_map(|(gi, v)| {
            let x0 = gi as f64 + 0.1 + si as f64 * width;
            v.map(|v| Rectangle::new([(x0, lo), (x0 + width * 0.9, v)], c.filled()))
        });
        chart
            .draw_series(bars)
            .map_err(|x| e(&x))?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))
}

/// Lines on log-log axes: `(x, rows/s)` points per series.
pub fn line_chart(path: &Path, title: &str, x_desc: &str, series: &[(String, Vec<(f64, f64)>)]) -> ChartResult {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let (ylo, yhi) = log_bounds(series.iter().flat_map(|(_, v)| v.iter().map(|p| p.1)));
    let xs = || series.iter().flat_map(|(_, v)| v.iter().map(|p| p.0));
    let xlo = xs().fold(f64::MAX, f64::min).clamp(1e-9, 1.0);
    let xhi = xs().fold(1.0, f64::max) * 1.5;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d((xlo..xhi).log_scale(), (ylo..yhi).log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("rows/s or IOPS (median, log scale)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()
        .map_err(|x| e(&x))?;
    for (si, (name, pts)) in series.iter().enumerate() {
        let c = color(si);
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled()))).map_err(|x| e(&x))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))
}
