//! The PNG beside the JSON: for each run (one band per mode, top to bottom in
//! the JSON's order), per-second throughput (upper half of the band, blue) and
//! p99.9 latency (lower half, red, log scale from 10 µs to 10 s) against time,
//! with the migration's start (green), ownership transfer (orange) and end
//! (black) as vertical lines. Drawn by hand into an RGB buffer and encoded with
//! the `png` crate: no font is needed, so the axes carry no text; the scales are
//! printed next to the path and the numbers are in the JSON.

use std::path::Path;

use anyhow::Context;

use super::summary::Run;

const WIDTH: usize = 1200;
const BAND: usize = 300;
const MARGIN: usize = 20;

type Rgb = [u8; 3];
const WHITE: Rgb = [255, 255, 255];
const GREY: Rgb = [200, 200, 200];
const BLUE: Rgb = [31, 119, 180];
const RED: Rgb = [214, 39, 40];
const GREEN: Rgb = [44, 160, 44];
const ORANGE: Rgb = [255, 127, 14];
const BLACK: Rgb = [0, 0, 0];

/// Lowest and highest p99.9 the log scale shows (µs).
const P999_RANGE_US: (f64, f64) = (10.0, 10_000_000.0);

struct Canvas {
    width: usize,
    height: usize,
    pixels: Vec<u8>,
}

impl Canvas {
    fn new(width: usize, height: usize) -> Self {
        Self {
            width,
            height,
            pixels: WHITE.repeat(width * height),
        }
    }

    fn set(&mut self, x: i64, y: i64, c: Rgb) {
        if x < 0 || y < 0 || x as usize >= self.width || y as usize >= self.height {
            return;
        }
        let i = (y as usize * self.width + x as usize) * 3;
        self.pixels[i..i + 3].copy_from_slice(&c);
    }

    /// A line two pixels wide (Bresenham).
    fn line(&mut self, (x0, y0): (i64, i64), (x1, y1): (i64, i64), c: Rgb) {
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let (mut x, mut y, mut err) = (x0, y0, dx + dy);
        loop {
            self.set(x, y, c);
            self.set(x + 1, y, c);
            self.set(x, y + 1, c);
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }
}

/// A plot area: pixels `[x0, x1] × [y0, y1]` (y grows downwards).
#[derive(Clone, Copy)]
struct Area {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

impl Area {
    /// The point of `(t, v)` with `t` in `[0, t_max]` and `v` in `[0, 1]`.
    fn at(&self, t: f64, t_max: f64, v: f64) -> (i64, i64) {
        let x = self.x0 + (self.x1 - self.x0) * (t / t_max.max(1e-9)).clamp(0.0, 1.0);
        let y = self.y1 - (self.y1 - self.y0) * v.clamp(0.0, 1.0);
        (x as i64, y as i64)
    }
}

/// Writes the plot of `runs` to `path`.
pub fn write_png(path: &Path, runs: &[Run]) -> anyhow::Result<()> {
    let height = BAND * runs.len().max(1);
    let mut canvas = Canvas::new(WIDTH, height);
    let t_max = runs.iter().map(|r| r.marks.end_s).fold(1.0f64, f64::max);
    for (i, run) in runs.iter().enumerate() {
        let top = (i * BAND) as f64;
        let half = (BAND - 2 * MARGIN) as f64 / 2.0;
        let x = (MARGIN as f64, (WIDTH - MARGIN) as f64);
        let tput = Area {
            x0: x.0,
            x1: x.1,
            y0: top + MARGIN as f64,
            y1: top + MARGIN as f64 + half - 4.0,
        };
        let lat = Area {
            x0: x.0,
            x1: x.1,
            y0: top + MARGIN as f64 + half + 4.0,
            y1: top + (BAND - MARGIN) as f64,
        };
        for a in [tput, lat] {
            frame(&mut canvas, a);
        }
        // Decades of the latency scale as grey lines.
        let (lo, hi) = (P999_RANGE_US.0.log10(), P999_RANGE_US.1.log10());
        for d in (lo as i64 + 1)..(hi as i64) {
            let v = (d as f64 - lo) / (hi - lo);
            canvas.line(lat.at(0.0, 1.0, v), lat.at(1.0, 1.0, v), GREY);
        }
        let peak = run.seconds.iter().map(|s| s.ops).max().unwrap_or(1).max(1) as f64;
        let tput_points: Vec<_> = run
            .seconds
            .iter()
            .map(|s| tput.at(s.t_s as f64 + 0.5, t_max, s.ops as f64 / (peak * 1.1)))
            .collect();
        let lat_points: Vec<_> = run
            .seconds
            .iter()
            .filter(|s| s.ops > 0)
            .map(|s| {
                let v = ((s.p999_us.max(1) as f64).log10() - lo) / (hi - lo);
                lat.at(s.t_s as f64 + 0.5, t_max, v)
            })
            .collect();
        polyline(&mut canvas, &tput_points, BLUE);
        polyline(&mut canvas, &lat_points, RED);
        let m = run.marks;
        for (t, c) in [
            (m.start_s, GREEN),
            (m.ownership_s, ORANGE),
            (m.done_s, BLACK),
        ] {
            canvas.line(tput.at(t, t_max, 1.0), lat.at(t, t_max, 0.0), c);
        }
    }
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), WIDTH as u32, height as u32);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&canvas.pixels)?;
    writer.finish()?;
    Ok(())
}

fn frame(canvas: &mut Canvas, a: Area) {
    let corners = [
        (a.x0 as i64, a.y0 as i64),
        (a.x1 as i64, a.y0 as i64),
        (a.x1 as i64, a.y1 as i64),
        (a.x0 as i64, a.y1 as i64),
    ];
    for i in 0..4 {
        canvas.line(corners[i], corners[(i + 1) % 4], GREY);
    }
}

fn polyline(canvas: &mut Canvas, points: &[(i64, i64)], c: Rgb) {
    for w in points.windows(2) {
        canvas.line(w[0], w[1], c);
    }
}

/// How to read the plot, printed beside its path.
pub const LEGEND: &str = "one band per run (JSON order); upper half: ops/s per second (blue, \
     0 to 1.1 × the run's busiest second); lower half: p99.9 per second (red, log scale 10 µs – \
     10 s, grey lines at each decade); vertical lines: migration start (green), ownership \
     transfer (orange), done (black); x: seconds of fixed load, the same scale for every run";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canvas_line_stays_inside_and_reaches_both_ends() {
        let mut c = Canvas::new(10, 10);
        c.line((-5, -5), (20, 20), BLACK);
        c.line((0, 9), (9, 9), RED);
        assert_eq!(&c.pixels[..3], &BLACK);
        let last = (9 * 10 + 9) * 3;
        assert_eq!(&c.pixels[last..last + 3], &RED);
    }
}
