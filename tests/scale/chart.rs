//! Charts as plain SVG text: one line per proxy and mode against the number of Services (log
//! scale), in stacked panels. Pure: values in, text out. `png.rs` turns the text into a PNG.
//!
//! A phase that ran out of time is drawn at its limit as an open marker labelled "> N s", so a
//! limit never reads as a measurement; a proxy with no figure at any scale stays in the legend
//! with the reason (e.g. "not built (issue 7)").

use std::fmt::Write as _;

use super::axis::{Axis, YAxis, number};
use super::report::{Figure, ScaleReport};

/// Column indices in [`super::report::COLUMNS`].
const COLD_CONNECTION: usize = 1;
const FIRST_SYNC: usize = 2;
const PEAK_RSS: usize = 12;
const FIRST_PACKET_P50: usize = 14;
const FIRST_PACKET_P99: usize = 15;
const FLOOR_P50: usize = 16;

const WIDTH: f64 = 900.0;
const LEFT: f64 = 80.0;
const PLOT_WIDTH: f64 = 600.0;
const PANEL_HEIGHT: f64 = 300.0;
const PLOT_HEIGHT: f64 = 210.0;

/// One value of a series; `over` marks a limit that was hit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub services: f64,
    pub value: f64,
    pub over: bool,
}

/// One proxy and mode's line; `note` replaces the line when it has no points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub color: &'static str,
    pub dashed: bool,
    pub points: Vec<Point>,
    pub note: Option<String>,
}

/// One plot: a title, a unit the values are multiplied into, an axis, its lines.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    pub title: String,
    /// Values are multiplied by `scale` before drawing (seconds → µs: 1e6), labelled `unit`.
    pub scale: f64,
    pub unit: &'static str,
    pub axis: Axis,
    pub series: Vec<Series>,
}

/// Cold sync (to the first connection, and the proxy's own timing of its first sync) and peak
/// RSS against the number of Services.
pub fn sync_and_rss(reports: &[ScaleReport]) -> String {
    let panels = [
        panel(
            reports,
            COLD_CONNECTION,
            "cold sync: proxy start → first connection through a ClusterIP",
            (1.0, "s"),
            Axis::Log,
        ),
        panel(
            reports,
            FIRST_SYNC,
            "the first sync as the proxy times it (sync_proxy_rules_duration_seconds)",
            (1.0, "s"),
            Axis::Log,
        ),
        panel(
            reports,
            PEAK_RSS,
            "peak RSS of the proxy process",
            (1.0, "MiB"),
            Axis::Linear,
        ),
    ];
    svg(reports, &panels)
}

/// First-packet latency (median and p99) against the number of Services, with the floor.
pub fn first_packet(reports: &[ScaleReport]) -> String {
    let mut p50 = panel(
        reports,
        FIRST_PACKET_P50,
        "first packet: TCP connect to a ClusterIP, median (proxy idle after its cold sync)",
        (1e6, "µs"),
        Axis::Linear,
    );
    let floor = floor_series(reports);
    if !floor.points.is_empty() {
        p50.series.push(floor);
    }
    let p99 = panel(
        reports,
        FIRST_PACKET_P99,
        "first packet: TCP connect to a ClusterIP, p99",
        (1e6, "µs"),
        Axis::Linear,
    );
    svg(reports, &[p50, p99])
}

/// The color of a proxy and mode, the same in every chart.
fn color(label: &str) -> &'static str {
    match label {
        "ours/nftables" => "#1b7837",
        "ours/iptables" => "#7fbf7b",
        "upstream/nftables" => "#2166ac",
        "upstream/iptables" => "#b2182b",
        "ours/ipvs" => "#35978f",
        "upstream/ipvs" => "#e08214",
        _ => "#762a83",
    }
}

/// Column `column` of every proxy across the reports, one series per proxy and mode.
fn panel(
    reports: &[ScaleReport],
    column: usize,
    title: &str,
    (scale, unit): (f64, &'static str),
    axis: Axis,
) -> Panel {
    let mut series: Vec<Series> = Vec::new();
    for report in reports {
        for r in &report.results {
            let label = r.kind.label();
            let at = match series.iter().position(|s| s.label == label) {
                Some(i) => i,
                None => {
                    series.push(Series {
                        color: color(&label),
                        label,
                        dashed: false,
                        points: Vec::new(),
                        note: None,
                    });
                    series.len() - 1
                }
            };
            let s = &mut series[at];
            let services = report.scale.services as f64;
            let point = match &r.figures {
                Ok(figures) => figures.get(column).and_then(|f| match f {
                    Figure::Secs(v) | Figure::Mib(v) => Some((*v, false)),
                    Figure::Over(v) => Some((*v, true)),
                    _ => None,
                }),
                Err(why) => {
                    s.note = Some(why.clone());
                    None
                }
            };
            if let Some((value, over)) = point {
                // A later run of the same scale replaces an earlier one.
                s.points.retain(|p| p.services != services);
                s.points.push(Point {
                    services,
                    value,
                    over,
                });
            }
        }
    }
    for s in &mut series {
        s.points.sort_by(|a, b| a.services.total_cmp(&b.services));
        if !s.points.is_empty() {
            s.note = None;
        }
    }
    Panel {
        title: title.to_owned(),
        scale,
        unit,
        axis,
        series,
    }
}

/// The probe's floor (no rules, straight to the pod): the mean over the proxies of each scale.
fn floor_series(reports: &[ScaleReport]) -> Series {
    let mut points: Vec<Point> = reports
        .iter()
        .filter_map(|r| {
            let v: Vec<f64> = r
                .results
                .iter()
                .filter_map(|p| p.figures.as_ref().ok()?.get(FLOOR_P50)?.number())
                .collect();
            (!v.is_empty()).then(|| Point {
                services: r.scale.services as f64,
                value: v.iter().sum::<f64>() / v.len() as f64,
                over: false,
            })
        })
        .collect();
    points.sort_by(|a, b| a.services.total_cmp(&b.services));
    points.dedup_by(|a, b| a.services == b.services);
    Series {
        label: "floor: no rules".to_owned(),
        color: "#888888",
        dashed: true,
        points,
        note: None,
    }
}

/// The document: panels stacked, a shared x axis of Service counts per panel.
fn svg(reports: &[ScaleReport], panels: &[Panel]) -> String {
    let height = PANEL_HEIGHT * panels.len() as f64 + 10.0;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" font-family=\"DejaVu Sans, sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let mut ticks: Vec<(f64, String)> = reports
        .iter()
        .map(|r| (r.scale.services as f64, r.scale.to_string()))
        .collect();
    ticks.sort_by(|a, b| a.0.total_cmp(&b.0));
    ticks.dedup_by(|a, b| a.0 == b.0);
    for (i, p) in panels.iter().enumerate() {
        draw_panel(&mut out, p, &ticks, PANEL_HEIGHT * i as f64);
    }
    out.push_str("</svg>\n");
    out
}

fn draw_panel(out: &mut String, p: &Panel, ticks: &[(f64, String)], top: f64) {
    let base = top + 40.0 + PLOT_HEIGHT;
    let _ = writeln!(
        out,
        "<text x=\"{LEFT}\" y=\"{}\" font-size=\"14\">{} ({}{})</text>",
        top + 22.0,
        escape(&p.title),
        p.unit,
        if p.axis == Axis::Log {
            ", log scale"
        } else {
            ""
        }
    );
    let values: Vec<f64> = p
        .series
        .iter()
        .flat_map(|s| &s.points)
        .map(|pt| pt.value * p.scale)
        .filter(|v| *v > 0.0 && v.is_finite())
        .collect();
    if values.is_empty() || ticks.is_empty() {
        let _ = writeln!(
            out,
            "<text x=\"{LEFT}\" y=\"{}\">no data</text>",
            base - PLOT_HEIGHT / 2.0
        );
        legend(out, p, top);
        return;
    }
    let y_axis = YAxis::fit(p.axis, &values);
    let y = |v: f64| base - y_axis.fraction(v) * PLOT_HEIGHT;
    for (v, label) in y_axis.ticks() {
        let yy = y(v);
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
            LEFT + PLOT_WIDTH,
            LEFT - 6.0,
            yy + 4.0
        );
    }
    let (lo, hi) = (ticks[0].0.log10(), ticks[ticks.len() - 1].0.log10());
    let x = |services: f64| {
        if hi - lo < 1e-9 {
            return LEFT + PLOT_WIDTH / 2.0;
        }
        LEFT + 30.0 + (services.log10() - lo) / (hi - lo) * (PLOT_WIDTH - 60.0)
    };
    let mut last_x = f64::MIN;
    let mut row = 0.0;
    for (services, label) in ticks {
        let xx = x(*services);
        // Labels closer than their width take turns on two rows.
        row = if xx - last_x < 90.0 && row == 0.0 {
            14.0
        } else {
            0.0
        };
        last_x = xx;
        let _ = writeln!(
            out,
            "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{}\" y2=\"{base}\" stroke=\"#eee\"/><text x=\"{xx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\">{label}</text>",
            base - PLOT_HEIGHT,
            base + 16.0 + row
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\" fill=\"#555\">Services × endpoints each (Services on a log scale)</text>",
        LEFT + PLOT_WIDTH / 2.0,
        base + 46.0
    );
    // Where value labels went, so a label that would cover another moves up a line.
    let mut placed: Vec<(f64, f64)> = Vec::new();
    for s in &p.series {
        let pts: Vec<(f64, f64, &Point)> = s
            .points
            .iter()
            .map(|pt| (x(pt.services), y(pt.value * p.scale), pt))
            .collect();
        if pts.len() > 1 {
            let path: Vec<String> = pts
                .iter()
                .map(|(a, b, _)| format!("{a:.1},{b:.1}"))
                .collect();
            let _ = writeln!(
                out,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}/>",
                path.join(" "),
                s.color,
                if s.dashed {
                    " stroke-dasharray=\"6,4\""
                } else {
                    ""
                }
            );
        }
        for (px, py, pt) in pts {
            let v = pt.value * p.scale;
            let (fill, text) = if pt.over {
                ("white", format!("&gt; {}", number(v)))
            } else {
                (s.color, number(v))
            };
            let mut ly = py - 6.0;
            while placed
                .iter()
                .any(|(x0, y0)| (x0 - px).abs() < 30.0 && (y0 - ly).abs() < 11.0)
            {
                ly -= 11.0;
            }
            placed.push((px, ly));
            let _ = writeln!(
                out,
                "<circle cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"4\" fill=\"{fill}\" stroke=\"{}\" stroke-width=\"2\"/><text x=\"{:.1}\" y=\"{ly:.1}\" font-size=\"10\" fill=\"{}\">{text}</text>",
                s.color,
                px + 6.0,
                s.color
            );
        }
    }
    legend(out, p, top);
}

/// The legend, right of the plot: one line per series, with its note when it has no points.
fn legend(out: &mut String, p: &Panel, top: f64) {
    let lx = LEFT + PLOT_WIDTH + 20.0;
    let mut ly = top + 55.0;
    for s in &p.series {
        let _ = writeln!(
            out,
            "<rect x=\"{lx}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{ly:.1}\">{}</text>",
            ly - 10.0,
            s.color,
            lx + 18.0,
            escape(&s.label)
        );
        ly += 16.0;
        if let Some(note) = &s.note {
            let _ = writeln!(
                out,
                "<text x=\"{}\" y=\"{ly:.1}\" font-size=\"10\" fill=\"#555\">{}</text>",
                lx + 18.0,
                escape(note)
            );
            ly += 16.0;
        }
    }
    let _ = writeln!(
        out,
        "<text x=\"{lx}\" y=\"{:.1}\" font-size=\"10\" fill=\"#555\">open marker: hit the limit</text>",
        ly + 8.0
    );
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
