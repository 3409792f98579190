//! SVG plots with `plotters` (SVG backend only, no font libraries): test metric vs round, wire bytes per round
//! against the 4·d·r cost model, and round time. One line per setting, so a `--vns` sweep is one comparison.

use std::path::{Path, PathBuf};

use node::engine::RoundMetrics;
use plotters::prelude::*;

use crate::report::{Summary, mean_series};

/// One line of a plot.
pub struct Line {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// Thin and pale (per-RN detail behind the means), without a legend entry.
    pub faint: bool,
    pub dashed_gray: bool,
}

/// Draws lines into an SVG file.
pub fn line_plot(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    lines: &[Line],
) -> anyhow::Result<()> {
    let pts = lines
        .iter()
        .flat_map(|l| l.points.iter())
        .filter(|p| p.0.is_finite() && p.1.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if x1 - x0 < 1e-9 {
        x1 = x0 + 1.0;
    }
    let pad = ((y1 - y0) * 0.08).max(y1.abs() * 1e-3).max(1e-9);
    let (y0, y1) = (y0 - pad, y1 + pad);
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(80)
            .build_cartesian_2d(x0..x1, y0..y1)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .y_label_formatter(&|v| short(*v))
            .x_label_formatter(&|v| {
                if x1 - x0 <= 5.0 {
                    format!("{v:.2}")
                } else {
                    format!("{v:.0}")
                }
            })
            .draw()?;
        let mut colour = 0;
        for l in lines {
            let pts: Vec<(f64, f64)> = l
                .points
                .iter()
                .copied()
                .filter(|p| p.0.is_finite() && p.1.is_finite())
                .collect();
            if l.faint {
                chart.draw_series(LineSeries::new(
                    pts,
                    RGBColor(170, 170, 200).mix(0.5).stroke_width(1),
                ))?;
                continue;
            }
            let style = if l.dashed_gray {
                RGBColor(120, 120, 120).stroke_width(1)
            } else {
                Palette99::pick(colour).stroke_width(2)
            };
            if !l.dashed_gray {
                colour += 1;
            }
            let legend_style = style;
            if l.dashed_gray {
                chart.draw_series(DashedLineSeries::new(pts, 6, 4, style))?
            } else {
                chart.draw_series(LineSeries::new(pts, style))?
            }
            .label(l.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], legend_style));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow::anyhow!("plotting {}: {e}", path.display()))
}

/// One series of an [`errorbar_plot`]: `(x, mean, spread)` points, joined by a line, each with a vertical
/// bar of ± spread.
pub struct ErrSeries {
    pub label: String,
    pub points: Vec<(f64, f64, f64)>,
}

/// Draws series with error bars into an SVG file; with `log2_x` the x axis is log₂ (k = 1, 2, 4, 8, 16 evenly
/// spaced) and labelled with the x values. `references` are dashed gray horizontal lines (chance levels).
pub fn errorbar_plot(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    log2_x: bool,
    series: &[ErrSeries],
    references: &[(&str, f64)],
) -> anyhow::Result<()> {
    let tx = |x: f64| if log2_x { x.log2() } else { x };
    let finite = |p: &&(f64, f64, f64)| p.0.is_finite() && p.1.is_finite() && p.2.is_finite();
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, m, e) in series.iter().flat_map(|s| s.points.iter()).filter(finite) {
        let x = tx(x);
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(m - e), y1.max(m + e));
    }
    for &(_, y) in references {
        (y0, y1) = (y0.min(y), y1.max(y));
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    let xpad = ((x1 - x0) * 0.05).max(0.1);
    let (x0, x1) = (x0 - xpad, x1 + xpad);
    let pad = ((y1 - y0) * 0.08).max(1e-9);
    let (y0, y1) = (y0 - pad, y1 + pad);
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(80)
            .build_cartesian_2d(x0..x1, y0..y1)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            // log₂ axis: one tick per power of two.
            .x_labels(if log2_x {
                (x1 - x0).floor() as usize + 1
            } else {
                10
            })
            .y_label_formatter(&|v| short(*v))
            .x_label_formatter(&|v| {
                if log2_x {
                    format!("{:.0}", 2f64.powf(*v))
                } else {
                    short(*v)
                }
            })
            .draw()?;
        for (i, s) in series.iter().enumerate() {
            let colour = Palette99::pick(i);
            let pts: Vec<(f64, f64, f64)> = s
                .points
                .iter()
                .filter(finite)
                .map(|&(x, m, e)| (tx(x), m, e))
                .collect();
            let style = colour.stroke_width(2);
            chart
                .draw_series(LineSeries::new(pts.iter().map(|p| (p.0, p.1)), style))?
                .label(s.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            let cap = (x1 - x0) * 0.006;
            chart.draw_series(pts.iter().flat_map(|&(x, m, e)| {
                [
                    PathElement::new(vec![(x, m - e), (x, m + e)], style),
                    PathElement::new(vec![(x - cap, m - e), (x + cap, m - e)], style),
                    PathElement::new(vec![(x - cap, m + e), (x + cap, m + e)], style),
                ]
            }))?;
            chart.draw_series(
                pts.iter()
                    .map(|&(x, m, _)| Circle::new((x, m), 3, colour.filled())),
            )?;
        }
        for &(label, y) in references {
            let style = RGBColor(120, 120, 120).stroke_width(1);
            chart
                .draw_series(DashedLineSeries::new([(x0, y), (x1, y)], 6, 4, style))?
                .label(label.to_string())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow::anyhow!("plotting {}: {e}", path.display()))
}

/// Compact tick labels: 0.8125, 12.5k, 3.2M.
fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// Writes `metric.svg`, `bytes.svg` and `round_time.svg`; returns their paths.
pub fn write_all(
    dir: &Path,
    summaries: &[Summary],
    runs: &[&[Vec<RoundMetrics>]],
) -> anyhow::Result<Vec<PathBuf>> {
    let metric = summaries
        .first()
        .map_or("metric".into(), |s| s.metric_name.to_string());
    let mut lines = Vec::new();
    // Per-RN lines behind the mean when one setting is shown and they are few enough to read.
    if runs.len() == 1 && runs[0].len() <= 32 {
        for ms in runs[0] {
            let pts = std::iter::once((0.0, summaries[0].initial_metric))
                .chain(
                    ms.iter()
                        .map(|m| (m.round.get() as f64 + 1.0, m.test_metric)),
                )
                .collect();
            lines.push(Line {
                label: String::new(),
                points: pts,
                faint: true,
                dashed_gray: false,
            });
        }
    }
    for (s, run) in summaries.iter().zip(runs) {
        let series = mean_series(run, |m| m.test_metric);
        let pts = std::iter::once((0.0, s.initial_metric))
            .chain(series.iter().enumerate().map(|(t, v)| (t as f64 + 1.0, *v)))
            .collect();
        lines.push(solid(
            format!("k={} {} (mean over RNs)", s.vns, s.algo),
            pts,
        ));
    }
    if let Some(t) = summaries.first().and_then(|s| s.target_metric) {
        let x1 = summaries.iter().map(|s| s.rounds).max().unwrap_or(1) as f64;
        lines.push(reference(&format!("target {t}"), 0.0, x1, t));
    }
    let first = &summaries[0];
    let title = format!(
        "Test {metric}: {} nodes, r = {}, {} ({})",
        first.nodes, first.degree, first.dataset, first.mode
    );
    let metric_path = dir.join("metric.svg");
    line_plot(
        &metric_path,
        &title,
        "round (0 = initial model)",
        &format!("test {metric}"),
        &lines,
    )?;

    let mut lines = per_setting(summaries, runs, "wire bytes", |m| m.bytes_sent as f64);
    let x1 = first.rounds as f64;
    let model = first.cost_model_bytes_per_rn_per_round;
    lines.push(reference("cost model 4·d·r", 1.0, x1.max(2.0), model));
    let bytes_path = dir.join("bytes.svg");
    line_plot(
        &bytes_path,
        "Bytes sent per RN per round (mean over RNs)",
        "round",
        "bytes",
        &lines,
    )?;

    let lines = per_setting(summaries, runs, "", |m| m.round_secs);
    let time_path = dir.join("round_time.svg");
    let unit = if first.mode == "sim" {
        "virtual seconds"
    } else {
        "seconds"
    };
    line_plot(
        &time_path,
        "Round time (mean over RNs)",
        "round",
        unit,
        &lines,
    )?;
    let mut paths = vec![metric_path, bytes_path, time_path];
    if summaries.iter().any(|s| s.audit.is_some()) {
        paths.extend(write_audit(dir, summaries)?);
    }
    Ok(paths)
}

/// One line per setting: the mean over RNs of `f` at rounds 1, 2, …
fn per_setting(
    summaries: &[Summary],
    runs: &[&[Vec<RoundMetrics>]],
    what: &str,
    f: impl Fn(&RoundMetrics) -> f64,
) -> Vec<Line> {
    summaries
        .iter()
        .zip(runs)
        .map(|(s, run)| {
            let pts = mean_series(run, &f)
                .iter()
                .enumerate()
                .map(|(t, v)| (t as f64 + 1.0, *v))
                .collect();
            let label = format!("k={} {} {what}", s.vns, s.algo);
            solid(label.trim_end().to_string(), pts)
        })
        .collect()
}

fn solid(label: String, points: Vec<(f64, f64)>) -> Line {
    Line {
        label,
        points,
        faint: false,
        dashed_gray: false,
    }
}

fn reference(label: &str, x0: f64, x1: f64, y: f64) -> Line {
    Line {
        label: label.into(),
        points: vec![(x0, y), (x1, y)],
        faint: false,
        dashed_gray: true,
    }
}

/// `audit_round.svg` (AUC and LA per audited round), `audit_cdf.svg` (per-victim AUC), and for a sweep
/// `audit_k.svg` (last audited round against k).
fn write_audit(dir: &Path, summaries: &[Summary]) -> anyhow::Result<Vec<PathBuf>> {
    let audited: Vec<(&Summary, &crate::audit::AuditReport)> = summaries
        .iter()
        .filter_map(|s| s.audit.as_ref().map(|a| (s, a)))
        .collect();
    let first = audited[0].1;
    let chance = first.overall.la_chance;
    let x1 = summaries.iter().map(|s| s.rounds).max().unwrap_or(1) as f64;
    let mut lines = Vec::new();
    for (s, a) in &audited {
        let pts = |f: &dyn Fn(&crate::audit::RoundAudit) -> f64| {
            a.rounds
                .iter()
                .map(|r| (r.round as f64 + 1.0, f(r)))
                .collect()
        };
        lines.push(solid(
            format!("k={} {} MIA AUC (median)", s.vns, s.algo),
            pts(&|r| r.summary.mia_auc_median),
        ));
        lines.push(solid(
            format!("k={} {} LA success", s.vns, s.algo),
            pts(&|r| r.summary.la_success),
        ));
    }
    lines.push(reference("AUC 0.5", 1.0, x1, 0.5));
    lines.push(reference("LA chance", 1.0, x1, chance));
    let round_path = dir.join("audit_round.svg");
    line_plot(
        &round_path,
        &format!(
            "Privacy audit: {} nodes, {} chunks per node per round",
            audited[0].0.nodes, first.chunks_per_rn
        ),
        "round",
        "MIA AUC / LA success rate",
        &lines,
    )?;

    let mut lines = Vec::new();
    for (s, a) in &audited {
        let mut aucs: Vec<f64> = a.per_victim_auc.iter().flatten().copied().collect();
        aucs.sort_by(f64::total_cmp);
        let n = aucs.len() as f64;
        let pts = aucs
            .iter()
            .enumerate()
            .flat_map(|(i, &v)| [(v, i as f64 / n), (v, (i + 1) as f64 / n)])
            .collect();
        lines.push(solid(format!("k={} {}", s.vns, s.algo), pts));
    }
    let cdf_path = dir.join("audit_cdf.svg");
    line_plot(
        &cdf_path,
        "Per-victim MIA AUC (mean over the chunks attacked of each node)",
        "MIA AUC",
        "fraction of victims",
        &lines,
    )?;
    let mut paths = vec![round_path, cdf_path];

    if audited.len() > 1 {
        let by_k = |f: &dyn Fn(&models::privacy::AuditSummary) -> f64| {
            audited
                .iter()
                .filter_map(|(s, a)| a.last.as_ref().map(|l| (s.vns as f64, f(&l.summary))))
                .collect::<Vec<_>>()
        };
        let (k0, k1) = (
            audited.iter().map(|(s, _)| s.vns).min().unwrap_or(1) as f64,
            audited.iter().map(|(s, _)| s.vns).max().unwrap_or(1) as f64,
        );
        let lines = vec![
            solid("MIA AUC (mean)".into(), by_k(&|x| x.mia_auc_mean)),
            solid("MIA AUC (median)".into(), by_k(&|x| x.mia_auc_median)),
            solid("LA success".into(), by_k(&|x| x.la_success)),
            reference("AUC 0.5", k0, k1, 0.5),
            reference("LA chance", k0, k1, chance),
        ];
        let k_path = dir.join("audit_k.svg");
        line_plot(
            &k_path,
            "Privacy audit against k (last audited round)",
            "virtual nodes per real node (k; 1 = EL)",
            "MIA AUC / LA success rate",
            &lines,
        )?;
        paths.push(k_path);
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_svg_without_fonts() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.svg");
        let lines = vec![
            Line {
                label: "a".into(),
                points: vec![(0.0, 1.0), (1.0, 2.0)],
                faint: false,
                dashed_gray: false,
            },
            Line {
                label: "b".into(),
                points: vec![(0.0, 1.5), (1.0, 1.5)],
                faint: false,
                dashed_gray: true,
            },
        ];
        line_plot(&p, "t", "x", "y", &lines).unwrap();
        let e = dir.path().join("e.svg");
        let series = [ErrSeries {
            label: "a".into(),
            points: vec![(1.0, 0.8, 0.02), (4.0, 0.6, 0.05), (16.0, 0.5, 0.0)],
        }];
        errorbar_plot(&e, "t", "k", "y", true, &series, &[("chance", 0.5)]).unwrap();
        let svg = std::fs::read_to_string(&e).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("polyline") && svg.contains("circle"));
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("polyline"),
            "{}",
            &svg[..200.min(svg.len())]
        );
    }
}
