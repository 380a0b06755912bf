//! Report pieces: Markdown tables and SVG plots (plotters' SVG backend: pure Rust, no
//! system fonts; text is left to the viewer's sans-serif).

use std::path::Path;

use plotters::prelude::*;

use crate::BenchError;

/// A Markdown table; cells are escaped for `|`.
pub fn markdown_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let esc = |s: &str| s.replace('|', "\\|");
    let mut out = String::new();
    out.push_str(&format!(
        "| {} |\n",
        headers
            .iter()
            .map(|h| esc(h))
            .collect::<Vec<_>>()
            .join(" | ")
    ));
    out.push_str(&format!("|{}\n", "---|".repeat(headers.len())));
    for r in rows {
        out.push_str(&format!(
            "| {} |\n",
            r.iter().map(|c| esc(c)).collect::<Vec<_>>().join(" | ")
        ));
    }
    out
}

fn plot_err(path: &Path) -> impl Fn(String) -> BenchError + '_ {
    move |detail| BenchError::Plot {
        path: path.to_path_buf(),
        detail,
    }
}

const SIZE: (u32, u32) = (900, 520);
const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// A histogram of `values` in `bins` equal-width bins, with the median and p99 marked.
pub fn histogram_svg(
    path: &Path,
    title: &str,
    x_label: &str,
    values: &[f64],
    bins: usize,
) -> Result<(), BenchError> {
    let err = plot_err(path);
    let s = crate::stats::sorted(values);
    let (Some(&lo), Some(&hi)) = (s.first(), s.last()) else {
        return Err(err("no values to plot".into()));
    };
    let bins = bins.max(1);
    let width = if hi > lo {
        (hi - lo) / bins as f64
    } else {
        1.0
    };
    let mut counts = vec![0usize; bins];
    for &v in &s {
        let b = (((v - lo) / width) as usize).min(bins - 1);
        counts[b] += 1;
    }
    let top = counts.iter().copied().max().unwrap_or(1) as f64 * 1.1;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(lo..lo + width * bins as f64, 0.0..top)
        .map_err(|e| err(e.to_string()))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc("count")
        .draw()
        .map_err(|e| err(e.to_string()))?;
    chart
        .draw_series(counts.iter().enumerate().map(|(i, &c)| {
            let x0 = lo + i as f64 * width;
            Rectangle::new([(x0, 0.0), (x0 + width, c as f64)], PALETTE[0].filled())
        }))
        .map_err(|e| err(e.to_string()))?;
    for (name, p, color) in [("median", 50.0, PALETTE[2]), ("p99", 99.0, PALETTE[3])] {
        if let Some(x) = crate::stats::percentile_sorted(&s, p) {
            chart
                .draw_series(LineSeries::new([(x, 0.0), (x, top)], color.stroke_width(2)))
                .map_err(|e| err(e.to_string()))?
                .label(format!("{name} {x:.3}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    root.present().map_err(|e| err(e.to_string()))
}

/// One bar per label on a logarithmic axis (KL divergences span decades), with an
/// optional threshold per bar drawn as a tick.
pub fn bars_log_svg(
    path: &Path,
    title: &str,
    y_label: &str,
    bars: &[(String, f64, Option<f64>)],
) -> Result<(), BenchError> {
    let err = plot_err(path);
    if bars.is_empty() {
        return Err(err("no bars to plot".into()));
    }
    let positive = |v: f64| v.is_finite() && v > 0.0;
    let vals = bars
        .iter()
        .flat_map(|(_, v, t)| [Some(*v), *t])
        .flatten()
        .filter(|&v| positive(v));
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in vals {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        (lo, hi) = (1e-6, 1.0);
    }
    let (lo, hi) = (lo / 3.0, hi * 3.0);
    let n = bars.len();
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(60)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..n as f64 - 0.5, (lo..hi).log_scale())
        .map_err(|e| err(e.to_string()))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                labels[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_desc(y_label)
        .y_label_formatter(&|y| format!("{y:.0e}"))
        .draw()
        .map_err(|e| err(e.to_string()))?;
    chart
        .draw_series(bars.iter().enumerate().filter(|(_, b)| positive(b.1)).map(
            |(i, (_, v, t))| {
                let over = t.is_some_and(|t| *v > t);
                let color = if over { PALETTE[3] } else { PALETTE[0] };
                Rectangle::new(
                    [(i as f64 - 0.35, lo), (i as f64 + 0.35, *v)],
                    color.filled(),
                )
            },
        ))
        .map_err(|e| err(e.to_string()))?;
    chart
        .draw_series(bars.iter().enumerate().filter_map(|(i, (_, _, t))| {
            let t = (*t)?;
            positive(t).then(|| {
                PathElement::new(
                    vec![(i as f64 - 0.45, t), (i as f64 + 0.45, t)],
                    BLACK.stroke_width(2),
                )
            })
        }))
        .map_err(|e| err(e.to_string()))?;
    root.present().map_err(|e| err(e.to_string()))
}

/// A series of points with error bars.
pub struct Series {
    pub name: String,
    /// (x, mean, sd)
    pub points: Vec<(f64, f64, f64)>,
}

/// Lines with ±sd error bars, e.g. tokens/s against thread count.
pub fn lines_svg(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<(), BenchError> {
    let err = plot_err(path);
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, m, sd) in pts() {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(m + sd);
    }
    if !x0.is_finite() {
        return Err(err("no points to plot".into()));
    }
    let pad = ((x1 - x0) * 0.1).max(0.5);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0 - pad..x1 + pad, 0.0..y1 * 1.15 + 1e-9)
        .map_err(|e| err(e.to_string()))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_labels(((x1 - x0) as usize + 1).clamp(2, 16))
        .draw()
        .map_err(|e| err(e.to_string()))?;
    for (k, s) in series.iter().enumerate() {
        let color = PALETTE[k % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(
                s.points.iter().map(|&(x, m, _)| (x, m)),
                color.stroke_width(2),
            ))
            .map_err(|e| err(e.to_string()))?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(
                s.points.iter().map(|&(x, m, sd)| {
                    ErrorBar::new_vertical(x, m - sd, m, m + sd, color.filled(), 8)
                }),
            )
            .map_err(|e| err(e.to_string()))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    root.present().map_err(|e| err(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_tables_escape_pipes() {
        let t = markdown_table(&["a", "b"], &[vec!["1".into(), "x|y".into()]]);
        assert_eq!(t, "| a | b |\n|---|---|\n| 1 | x\\|y |\n");
    }

    #[test]
    fn plots_are_written_as_svg() {
        let dir = tempfile::tempdir().expect("tempdir");
        let h = dir.path().join("h.svg");
        let vals: Vec<f64> = (0..200).map(|i| 10.0 + f64::from(i % 17) * 0.3).collect();
        histogram_svg(&h, "ITL", "ms", &vals, 20).expect("histogram");
        let b = dir.path().join("b.svg");
        bars_log_svg(
            &b,
            "KL",
            "KLD",
            &[
                ("q8_0".into(), 1e-3, Some(5e-3)),
                ("q4_0".into(), 2e-2, Some(1e-2)),
            ],
        )
        .expect("bars");
        let l = dir.path().join("l.svg");
        lines_svg(
            &l,
            "t/s",
            "threads",
            "tokens/s",
            &[Series {
                name: "pp512".into(),
                points: vec![(1.0, 100.0, 3.0), (2.0, 190.0, 5.0)],
            }],
        )
        .expect("lines");
        for p in [h, b, l] {
            let svg = std::fs::read_to_string(&p).expect("written");
            assert!(svg.starts_with("<svg"), "{}", p.display());
            assert!(svg.contains("<rect") || svg.contains("<polyline"));
        }
        assert!(histogram_svg(&dir.path().join("e.svg"), "e", "x", &[], 5).is_err());
    }
}
