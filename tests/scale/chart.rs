//! Charts as plain SVG text, no plotting dependency: grouped bars per scale, one bar per proxy,
//! on a logarithmic axis (the proxies differ by orders of magnitude). Pure.

use std::fmt::Write as _;

use super::report::{Figure, ScaleReport};

const COLORS: [&str; 4] = ["#1b7837", "#762a83", "#2166ac", "#b2182b"];
/// Column indices in [`super::report::COLUMNS`].
const COLD_CONNECTION: usize = 1;
const PEAK_RSS: usize = 12;

/// Cold sync (first connection) and peak RSS against scale, one bar per proxy.
pub fn cold_sync(reports: &[ScaleReport]) -> String {
    let mut out = String::from(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"640\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
    );
    panel(
        &mut out,
        reports,
        COLD_CONNECTION,
        "cold sync: proxy start → first connection through a ClusterIP (s, log scale)",
        0,
    );
    panel(
        &mut out,
        reports,
        PEAK_RSS,
        "peak RSS of the proxy process (MiB, log scale)",
        320,
    );
    out.push_str("</svg>\n");
    out
}

/// The value to plot, and a label; limits are drawn at the limit, marked with ">".
fn value(f: &Figure) -> Option<(f64, String)> {
    match f {
        Figure::Secs(v) | Figure::Mib(v) => Some((*v, format!("{v:.2}"))),
        Figure::Over(v) => Some((*v, format!(">{v:.0}"))),
        _ => None,
    }
}

fn panel(out: &mut String, reports: &[ScaleReport], column: usize, title: &str, top: i32) {
    let (left, width, height) = (70.0, 800.0, 220.0);
    let base = f64::from(top) + 50.0 + height;
    let _ = writeln!(
        out,
        "<text x=\"{left}\" y=\"{}\" font-size=\"14\">{title}</text>",
        top + 16
    );
    let points: Vec<f64> = reports
        .iter()
        .flat_map(|r| &r.results)
        .filter_map(|p| p.figures.as_ref().ok()?.get(column).and_then(value))
        .map(|(v, _)| v)
        .filter(|v| *v > 0.0)
        .collect();
    if points.is_empty() {
        let _ = writeln!(
            out,
            "<text x=\"{left}\" y=\"{}\">no data</text>",
            base - height / 2.0
        );
        return;
    }
    let lo = points
        .iter()
        .copied()
        .fold(f64::MAX, f64::min)
        .log10()
        .floor()
        - 0.0;
    let hi = points
        .iter()
        .copied()
        .fold(f64::MIN, f64::max)
        .log10()
        .ceil()
        .max(lo + 1.0);
    let y = |v: f64| base - (v.max(10f64.powf(lo)).log10() - lo) / (hi - lo) * height;
    for e in (lo as i32)..=(hi as i32) {
        let yy = y(10f64.powi(e));
        let _ = writeln!(
            out,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left + width,
            left - 6.0,
            yy + 4.0,
            10f64.powi(e)
        );
    }
    let group = width / reports.len().max(1) as f64;
    for (g, r) in reports.iter().enumerate() {
        let n = r.results.len().max(1) as f64;
        let bar = (group - 30.0) / n;
        let x0 = left + g as f64 * group + 15.0;
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            x0 + (group - 30.0) / 2.0,
            base + 18.0,
            r.scale
        );
        for (i, p) in r.results.iter().enumerate() {
            let x = x0 + i as f64 * bar;
            let color = COLORS[i % COLORS.len()];
            if g == 0 {
                let ly = f64::from(top) + 34.0;
                let lx = left + i as f64 * 140.0;
                let _ = writeln!(
                    out,
                    "<rect x=\"{lx}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{}\" y=\"{ly}\">{}</text>",
                    ly - 9.0,
                    lx + 14.0,
                    p.kind.label()
                );
            }
            let Some((v, label)) = p.figures.as_ref().ok().and_then(|f| value(f.get(column)?))
            else {
                continue;
            };
            let yy = y(v);
            let _ = writeln!(
                out,
                "<rect x=\"{x:.1}\" y=\"{yy:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{label}</text>",
                bar - 4.0,
                base - yy,
                x + (bar - 4.0) / 2.0,
                yy - 3.0
            );
        }
    }
}
