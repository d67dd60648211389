//! Y axes of the charts: where a value sits, which ticks to draw and how to label them. Pure.

/// How a panel's y axis is scaled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Axis {
    /// Decades; for figures that differ by orders of magnitude.
    Log,
    /// From zero; for figures whose flatness is the point.
    Linear,
}

/// A y axis fitted to the values.
#[derive(Debug, Clone, Copy)]
pub struct YAxis {
    axis: Axis,
    lo: f64,
    hi: f64,
    step: f64,
}

impl YAxis {
    pub fn fit(axis: Axis, values: &[f64]) -> YAxis {
        let max = values.iter().copied().fold(f64::MIN, f64::max);
        let min = values.iter().copied().fold(f64::MAX, f64::min);
        match axis {
            Axis::Log => {
                let lo = min.log10().floor();
                YAxis {
                    axis,
                    lo,
                    hi: max.log10().ceil().max(lo + 1.0),
                    step: 1.0,
                }
            }
            Axis::Linear => {
                // 1, 2 or 5 × a power of ten, so that at most six steps cover the maximum.
                let raw = max / 6.0;
                let mag = 10f64.powf(raw.log10().floor());
                let step = [1.0, 2.0, 5.0, 10.0]
                    .into_iter()
                    .map(|m| m * mag)
                    .find(|s| *s >= raw)
                    .unwrap_or(10.0 * mag);
                YAxis {
                    axis,
                    lo: 0.0,
                    hi: (max / step).ceil().max(1.0) * step,
                    step,
                }
            }
        }
    }

    /// Where `v` sits, 0 at the bottom and 1 at the top.
    pub fn fraction(&self, v: f64) -> f64 {
        let f = match self.axis {
            Axis::Log => (v.max(1e-12).log10() - self.lo) / (self.hi - self.lo),
            Axis::Linear => (v - self.lo) / (self.hi - self.lo),
        };
        f.clamp(0.0, 1.0)
    }

    pub fn ticks(&self) -> Vec<(f64, String)> {
        let n = ((self.hi - self.lo) / self.step).round() as i32;
        (0..=n)
            .map(|i| {
                let t = self.lo + f64::from(i) * self.step;
                match self.axis {
                    Axis::Log => (10f64.powf(t), number(10f64.powf(t))),
                    Axis::Linear => (t, number(t)),
                }
            })
            .collect()
    }
}

/// A short label: `0.01`, `2.5`, `40`, `1,200`.
pub fn number(v: f64) -> String {
    if v >= 1000.0 {
        super::options::thousands(v.round() as usize)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_axis_steps_by_one_two_or_five() {
        let a = YAxis::fit(Axis::Linear, &[40.0, 130.0]);
        let labels: Vec<String> = a.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["0", "50", "100", "150"]);
        assert_eq!(a.fraction(75.0), 0.5);
    }

    #[test]
    fn log_axis_spans_whole_decades() {
        let a = YAxis::fit(Axis::Log, &[0.4, 36.0]);
        let labels: Vec<String> = a.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["0.1", "1.0", "10", "100"]);
        assert!((a.fraction(1.0) - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(number(44_000.0), "44,000");
    }
}
