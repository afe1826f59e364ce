//! The training log: one row per logging or evaluation point, written as `metrics.csv` and
//! plotted as `metrics.svg` beside it. The history lives in the checkpoint, so a resumed run
//! continues the same files without gaps or duplicates.

use super::checkpoint::write_atomic;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io;
use std::path::Path;

/// One point of the training curves. Validation fields are set on evaluation rows only.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricsRow {
    pub step: usize,
    pub epoch: usize,
    pub lr: f64,
    /// Mean training loss since the previous row.
    pub train_loss: f64,
    pub val_loss: Option<f64>,
    pub val_bleu: Option<f64>,
    pub val_chrf: Option<f64>,
    /// Target tokens per second since the previous row.
    pub tokens_per_sec: f64,
    pub elapsed_secs: f64,
}

const HEADER: &str = "step,epoch,lr,train_loss,train_ppl,val_loss,val_ppl,val_bleu,val_chrf,tokens_per_sec,elapsed_secs";

fn opt(v: Option<f64>) -> String {
    v.map_or(String::new(), |v| format!("{v:.6}"))
}

/// Renders the rows as CSV (perplexities are `exp(loss)`).
pub fn to_csv(rows: &[MetricsRow]) -> String {
    let mut out = format!("{HEADER}\n");
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{:.8},{:.6},{:.4},{},{},{},{},{:.1},{:.1}",
            r.step,
            r.epoch,
            r.lr,
            r.train_loss,
            r.train_loss.exp(),
            opt(r.val_loss),
            opt(r.val_loss.map(f64::exp)),
            opt(r.val_bleu),
            opt(r.val_chrf),
            r.tokens_per_sec,
            r.elapsed_secs
        );
    }
    out
}

/// Writes `metrics.csv` and `metrics.svg` into `dir`, each atomically.
pub fn write(dir: &Path, rows: &[MetricsRow]) -> io::Result<()> {
    write_atomic(&dir.join("metrics.csv"), to_csv(rows).as_bytes())?;
    write_atomic(&dir.join("metrics.svg"), plot_svg(rows).as_bytes())
}

/// A curve: name, colour, `(step, value)` points.
type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

/// A two-panel SVG: training and validation loss against the step, and dev BLEU / chrF.
pub fn plot_svg(rows: &[MetricsRow]) -> String {
    let (w, h, pad) = (720.0, 260.0, 48.0);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
        2.0 * h
    );
    let max_step = rows.iter().map(|r| r.step).max().unwrap_or(1).max(1) as f64;
    let panels: [(&str, Vec<Series>); 2] = [
        (
            "loss",
            vec![
                (
                    "train",
                    "#1f77b4",
                    rows.iter().map(|r| (r.step as f64, r.train_loss)).collect(),
                ),
                (
                    "validation",
                    "#d62728",
                    rows.iter()
                        .filter_map(|r| Some((r.step as f64, r.val_loss?)))
                        .collect(),
                ),
            ],
        ),
        (
            "dev score",
            vec![
                (
                    "BLEU",
                    "#2ca02c",
                    rows.iter()
                        .filter_map(|r| Some((r.step as f64, r.val_bleu?)))
                        .collect(),
                ),
                (
                    "chrF",
                    "#9467bd",
                    rows.iter()
                        .filter_map(|r| Some((r.step as f64, r.val_chrf?)))
                        .collect(),
                ),
            ],
        ),
    ];
    for (i, (title, series)) in panels.iter().enumerate() {
        let top = i as f64 * h;
        let values = series.iter().flat_map(|s| s.2.iter().map(|p| p.1));
        let (lo, hi) = values
            .filter(|v| v.is_finite())
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            });
        let (lo, hi) = if lo.is_finite() {
            (lo.min(0.0), hi.max(lo + 1e-9))
        } else {
            (0.0, 1.0)
        };
        let x = |s: f64| pad + (w - 2.0 * pad) * s / max_step;
        let y = |v: f64| top + h - pad + (pad * 2.0 - h) * (v - lo) / (hi - lo);
        let _ = writeln!(
            svg,
            "<text x=\"{pad}\" y=\"{}\" font-weight=\"bold\">{title}</text>\n<line x1=\"{pad}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<line x1=\"{pad}\" y1=\"{}\" x2=\"{pad}\" y2=\"{}\" stroke=\"black\"/>\n<text x=\"4\" y=\"{}\">{hi:.2}</text><text x=\"4\" y=\"{}\">{lo:.2}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">step {max_step}</text>",
            top + 20.0,
            y(lo),
            w - pad,
            y(lo),
            y(lo),
            y(hi),
            y(hi) + 4.0,
            y(lo),
            w - pad,
            y(lo) + 16.0,
        );
        for (j, (name, color, points)) in series.iter().enumerate() {
            let path: Vec<String> = points
                .iter()
                .filter(|p| p.1.is_finite())
                .map(|&(s, v)| format!("{:.1},{:.1}", x(s), y(v)))
                .collect();
            let _ = writeln!(
                svg,
                "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/>\n<text x=\"{}\" y=\"{}\" fill=\"{color}\">{name}</text>",
                path.join(" "),
                w - pad - 90.0,
                top + 20.0 + 14.0 * j as f64,
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_has_a_row_per_point_and_blank_validation_fields() {
        let rows = vec![
            MetricsRow {
                step: 10,
                train_loss: 2.0,
                ..Default::default()
            },
            MetricsRow {
                step: 20,
                train_loss: 1.0,
                val_loss: Some(1.5),
                val_bleu: Some(12.5),
                ..Default::default()
            },
        ];
        let csv = to_csv(&rows);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], HEADER);
        assert!(lines[1].starts_with("10,0,"), "{}", lines[1]);
        assert_eq!(lines[1].split(',').nth(5), Some(""));
        assert_eq!(lines[2].split(',').nth(7), Some("12.500000"));
        let svg = plot_svg(&rows);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 4);
    }
}
