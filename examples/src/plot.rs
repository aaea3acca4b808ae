//! The examples' pictures, drawn with `plotters`' bitmap backend: the GPT
//! loss curve and the spirals decision boundary, as PNG.
//!
//! No system fonts are needed: text goes through `plotters`' `ab_glyph`
//! renderer with the Hack font embedded in the binary (from the
//! `epaint_default_fonts` crate), registered once under the family name
//! [`FONT`].

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::error::{Error, Result};

/// The font family every picture uses (registered on first use).
pub const FONT: &str = "hack";

fn register_font() -> Result<()> {
    static ONCE: Once = Once::new();
    let mut failed = false;
    ONCE.call_once(|| {
        failed = plotters::style::register_font(
            FONT,
            FontStyle::Normal,
            epaint_default_fonts::HACK_REGULAR,
        )
        .is_err();
    });
    if failed {
        return Err(Error::Plot {
            path: FONT.into(),
            msg: "the embedded font did not load".into(),
        });
    }
    Ok(())
}

fn plot_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Plot {
        path: path.to_path_buf(),
        msg: e.to_string(),
    }
}

/// A training run's losses for [`loss_curve_png`].
#[derive(Debug, Clone, Copy)]
pub struct LossCurve<'a> {
    /// Training loss of step `i + 1` at index `i`.
    pub train: &'a [f32],
    /// `(step, validation loss)`.
    pub val: &'a [(u64, f64)],
    /// The unigram baseline, drawn as a dashed level.
    pub baseline: f64,
}

/// Exponential moving average (bias-corrected, as TensorBoard's smoothing).
fn smooth(xs: &[f32], beta: f64) -> Vec<f64> {
    let mut m = 0.0;
    xs.iter()
        .enumerate()
        .map(|(i, &x)| {
            m = beta * m + (1.0 - beta) * x as f64;
            m / (1.0 - beta.powi(i as i32 + 1))
        })
        .collect()
}

/// Draws training loss (raw, faint, and smoothed), validation loss and the
/// unigram baseline against the step, 900×540 PNG.
pub fn loss_curve_png(path: &Path, c: &LossCurve) -> Result<()> {
    register_font()?;
    let n = c.train.len().max(1) as f64;
    let finite = |v: f64| v.is_finite();
    let hi = c
        .train
        .iter()
        .map(|&v| v as f64)
        .chain(c.val.iter().map(|v| v.1))
        .chain([c.baseline])
        .filter(|v| finite(*v))
        .fold(1.0f64, f64::max);
    let lo = c
        .train
        .iter()
        .map(|&v| v as f64)
        .chain(c.val.iter().map(|v| v.1))
        .filter(|v| finite(*v))
        .fold(hi, f64::min);
    let root = BitMapBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_err(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("char-GPT on Shakespeare: loss (nats/char)", (FONT, 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..n, (lo * 0.9).max(0.0)..hi * 1.05)
        .map_err(|e| plot_err(path, e))?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("loss")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.1}"))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|e| plot_err(path, e))?;
    let faint = RGBColor(31, 119, 180).mix(0.35);
    chart
        .draw_series(LineSeries::new(
            c.train
                .iter()
                .enumerate()
                .map(|(i, &v)| (i as f64 + 1.0, v as f64)),
            faint,
        ))
        .map_err(|e| plot_err(path, e))?;
    let blue = RGBColor(31, 119, 180);
    chart
        .draw_series(LineSeries::new(
            smooth(c.train, 0.95)
                .into_iter()
                .enumerate()
                .map(|(i, v)| (i as f64 + 1.0, v)),
            blue.stroke_width(2),
        ))
        .map_err(|e| plot_err(path, e))?
        .label("train (smoothed)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], blue.stroke_width(2)));
    let orange = RGBColor(255, 127, 14);
    chart
        .draw_series(LineSeries::new(
            c.val.iter().map(|&(s, v)| (s as f64, v)),
            orange.stroke_width(2),
        ))
        .map_err(|e| plot_err(path, e))?
        .label("validation (held-out tail)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], orange.stroke_width(2)));
    chart
        .draw_series(
            c.val
                .iter()
                .map(|&(s, v)| Circle::new((s as f64, v), 3, orange.filled())),
        )
        .map_err(|e| plot_err(path, e))?;
    let grey = RGBColor(110, 110, 110);
    let dash = n / 60.0; // 30 dashes across the plot
    let dashes = (0..30).map(|k| {
        let x0 = 2.0 * k as f64 * dash;
        PathElement::new(vec![(x0, c.baseline), (x0 + dash, c.baseline)], grey)
    });
    chart
        .draw_series(dashes)
        .map_err(|e| plot_err(path, e))?
        .label(format!("unigram baseline {:.2}", c.baseline))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey));
    chart
        .configure_series_labels()
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| plot_err(path, e))?;
    root.present().map_err(|e| plot_err(path, e))?;
    Ok(())
}

/// Maps points to the probability of class 1 (see [`decision_boundary_png`]).
pub type Classifier<'a> = &'a mut dyn FnMut(&[(f64, f64)]) -> Result<Vec<f64>>;

/// A two-class decision boundary: `classify` maps a point to the
/// probability of class 1; the plane is shaded by it and the data drawn on
/// top (class 0 blue, class 1 orange). 600×600 PNG over `[-lim, lim]²`.
pub fn decision_boundary_png(
    path: &Path,
    title: &str,
    lim: f64,
    points: &[(f64, f64, usize)],
    classify: Classifier<'_>,
) -> Result<()> {
    register_font()?;
    let root = BitMapBackend::new(path, (600, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_err(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 20))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(40)
        .build_cartesian_2d(-lim..lim, -lim..lim)
        .map_err(|e| plot_err(path, e))?;
    chart
        .configure_mesh()
        .disable_mesh()
        .label_style((FONT, 13))
        .draw()
        .map_err(|e| plot_err(path, e))?;
    const GRID: usize = 160;
    let cell = 2.0 * lim / GRID as f64;
    let centres: Vec<(f64, f64)> = (0..GRID * GRID)
        .map(|k| {
            let (i, j) = (k % GRID, k / GRID);
            (
                -lim + (i as f64 + 0.5) * cell,
                -lim + (j as f64 + 0.5) * cell,
            )
        })
        .collect();
    let p1 = classify(&centres)?;
    let shade = |p: f64| {
        // blend from light blue (class 0) to light orange (class 1)
        let (a, b) = ((198.0, 219.0, 239.0), (253.0, 208.0, 162.0));
        RGBColor(
            (a.0 + (b.0 - a.0) * p) as u8,
            (a.1 + (b.1 - a.1) * p) as u8,
            (a.2 + (b.2 - a.2) * p) as u8,
        )
    };
    chart
        .draw_series(centres.iter().zip(&p1).map(|(&(x, y), &p)| {
            Rectangle::new(
                [
                    (x - cell / 2.0, y - cell / 2.0),
                    (x + cell / 2.0, y + cell / 2.0),
                ],
                shade(p.clamp(0.0, 1.0)).filled(),
            )
        }))
        .map_err(|e| plot_err(path, e))?;
    let colors = [RGBColor(31, 119, 180), RGBColor(230, 97, 1)];
    chart
        .draw_series(
            points
                .iter()
                .map(|&(x, y, c)| Circle::new((x, y), 2, colors[c.min(1)].filled())),
        )
        .map_err(|e| plot_err(path, e))?;
    root.present().map_err(|e| plot_err(path, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoothing_is_bias_corrected() {
        let s = smooth(&[2.0, 2.0, 2.0], 0.9);
        assert!(s.iter().all(|v| (v - 2.0).abs() < 1e-12));
    }
}
