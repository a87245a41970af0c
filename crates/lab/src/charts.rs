//! PNG line charts for probe and bench results (plotters, pure Rust; text rendered with a TTF font
//! from the system, DejaVu Sans, which scripts/setup.sh installs).

use anyhow::{Context, Result};
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

/// One line: a name and its (x, y) points.
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Points; non-positive values are dropped on log axes.
    pub points: Vec<(f64, f64)>,
    /// Dashed lines mark baselines.
    pub baseline: bool,
}

const FONTS: &[&str] = &["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/dejavu/DejaVuSans.ttf"];

fn register_font() -> Result<()> {
    static ONCE: Once = Once::new();
    let mut res = Ok(());
    ONCE.call_once(|| {
        res = (|| {
            let path = FONTS.iter().find(|p| Path::new(p).exists()).context("no DejaVu Sans font found (apt-get install fonts-dejavu-core; scripts/setup.sh does)")?;
            let bytes: &'static [u8] = Box::leak(std::fs::read(path).with_context(|| format!("read {path}"))?.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).map_err(|_| anyhow::anyhow!("register font {path}"))?;
            Ok(())
        })();
    });
    res
}

fn bounds(series: &[Series], log: bool, pick: impl Fn(&(f64, f64)) -> f64) -> (f64, f64) {
    let vals = series.iter().flat_map(|s| s.points.iter().map(&pick)).filter(|v| v.is_finite() && (!log || *v > 0.0));
    let (lo, hi) = vals.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    if lo > hi {
        return (1.0, 10.0);
    }
    if log {
        (lo / 1.5, hi * 1.5)
    } else {
        (0.0, hi * 1.1)
    }
}

/// Draw a chart with logarithmic x and y axes.
pub fn log_log(path: &Path, title: &str, x_label: &str, y_label: &str, series: &[Series]) -> Result<()> {
    register_font()?;
    let root = BitMapBackend::new(path, (1000, 650)).into_drawing_area();
    root.fill(&WHITE)?;
    let (x0, x1) = bounds(series, true, |p| p.0);
    let (y0, y1) = bounds(series, true, |p| p.1);
    let mut chart = ChartBuilder::on(&root).caption(title, ("sans-serif", 24)).margin(15).x_label_area_size(45).y_label_area_size(80).build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())?;
    chart.configure_mesh().x_desc(x_label).y_desc(y_label).x_label_formatter(&|v| decimal(*v)).y_label_formatter(&|v| decimal(*v)).draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = s.points.iter().copied().filter(|(x, y)| *x > 0.0 && *y > 0.0 && y.is_finite()).collect();
        let style = ShapeStyle { color, filled: true, stroke_width: if s.baseline { 1 } else { 2 } };
        if s.baseline {
            chart.draw_series(DashedLineSeries::new(pts.clone(), 6, 4, style))?.label(&s.name).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        } else {
            chart.draw_series(LineSeries::new(pts.clone(), style))?.label(&s.name).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, style)))?;
        }
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.85)).border_style(BLACK).position(SeriesLabelPosition::UpperLeft).draw()?;
    root.present().with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

/// Draw a chart with linear axes starting at zero (e.g. seconds against replica count).
pub fn linear(path: &Path, title: &str, x_label: &str, y_label: &str, series: &[Series]) -> Result<()> {
    register_font()?;
    let root = BitMapBackend::new(path, (1000, 650)).into_drawing_area();
    root.fill(&WHITE)?;
    let (_, x1) = bounds(series, false, |p| p.0);
    let (_, y1) = bounds(series, false, |p| p.1);
    let mut chart = ChartBuilder::on(&root).caption(title, ("sans-serif", 24)).margin(15).x_label_area_size(45).y_label_area_size(70).build_cartesian_2d(0.0..x1.max(1.0) * 1.02, 0.0..y1.max(1e-3))?;
    // Replica counts and indices are whole numbers: label only those (one tick per whole number).
    let whole = series.iter().flat_map(|s| &s.points).all(|p| p.0.fract() == 0.0);
    let x_fmt = |v: &f64| {
        if !whole {
            decimal(*v)
        } else if v.fract() == 0.0 {
            format!("{v:.0}")
        } else {
            String::new()
        }
    };
    let mut mesh = chart.configure_mesh();
    if whole {
        mesh.x_labels(x1.max(1.0) as usize + 1);
    }
    mesh.x_desc(x_label).y_desc(y_label).x_label_formatter(&x_fmt).y_label_formatter(&|v| decimal(*v)).draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let style = ShapeStyle { color, filled: true, stroke_width: 2 };
        chart.draw_series(LineSeries::new(s.points.clone(), style))?.label(&s.name).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart.draw_series(s.points.iter().map(|p| Circle::new(*p, 4, style)))?;
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.85)).border_style(BLACK).position(SeriesLabelPosition::UpperLeft).draw()?;
    root.present().with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

/// 32, 1K, 4M style labels for byte sizes.
pub fn human_bytes(v: f64) -> String {
    let v = v.round();
    if v >= (1u64 << 20) as f64 {
        format!("{}M", (v / (1u64 << 20) as f64).round())
    } else if v >= 1024.0 {
        format!("{}K", (v / 1024.0).round())
    } else {
        format!("{v}")
    }
}

/// Compact decimal labels for log axes: 0.01, 5, 100, 10k, 1M.
pub fn decimal(v: f64) -> String {
    match v {
        0.0 => "0".into(),
        v if v >= 1e9 => format!("{}G", (v / 1e9 * 10.0).round() / 10.0),
        v if v >= 1e6 => format!("{}M", (v / 1e6 * 10.0).round() / 10.0),
        v if v >= 1e3 => format!("{}k", (v / 1e3 * 10.0).round() / 10.0),
        v if v >= 1.0 => format!("{}", (v * 10.0).round() / 10.0),
        v => format!("{v:.2e}"),
    }
}
