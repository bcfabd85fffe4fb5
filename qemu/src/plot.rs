//! The latency plots (`latency.svg`, `compare.svg`), drawn with `plotters`' SVG backend, and
//! the anatomy plot (`anatomy.svg`, [`stacked_svg`]): each size's round trip as a stacked bar.
//!
//! plotters does the coordinates, the log axes, the grid, the labels and the legend. Its SVG
//! backend writes flat elements, with no groups and no document metadata, so the plot is drawn
//! in layers that share one chart geometry (same size, margins and ranges): the frame (title,
//! axes), the inline band, each series (its line, its p99 whiskers, its points) and the legend.
//! Each layer's elements are then wrapped in a `<g>` that says what it is (`class="series"
//! data-transport="UD"`, `class="inline"` on a point), and the title and the provenance
//! `<metadata>` are inserted after the root element's start tag. Text is left to the viewer's
//! sans-serif font: the backend writes `<text>` elements, no font files are needed.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const W: u32 = 800;
const H: u32 = 500;
const SUBTITLE_LINE: u32 = 14;
/// Room left and right of the smallest and largest size, in powers of two.
const PAD: f64 = 0.3;

/// One measured size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub bytes: u64,
    /// The plotted latency (t_typical), microseconds, positive.
    pub us: f64,
    /// The 99th percentile, drawn as a whisker above the point when larger.
    pub p99: Option<f64>,
    /// Sent inline (filled marker) or not (hollow); `None`: not known (filled, no class).
    pub inline: Option<bool>,
}

/// One line: a test and transport (and stack).
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The legend's name; one ending in "UC" is drawn dashed, one starting with "Linux" in
    /// its own colours.
    pub name: String,
    pub points: Vec<Point>,
}

/// A whole plot.
#[derive(Clone, Debug, Default)]
pub struct Plot {
    pub title: String,
    /// Lines under the title (provenance; what the times measure).
    pub subtitle: Vec<String>,
    /// Text for the document's `<metadata id="provenance">` (the provenance as JSON).
    pub metadata: Option<String>,
    pub series: Vec<Series>,
}

fn colour(t: &str) -> RGBColor {
    let linux = t.starts_with("Linux");
    if t.ends_with("RC") {
        return if linux {
            RGBColor(0x8c, 0x56, 0x4b)
        } else {
            RGBColor(0xff, 0x7f, 0x0e)
        };
    }
    match (linux, t.ends_with("UC")) {
        (false, false) => RGBColor(0x1f, 0x77, 0xb4),
        (false, true) => RGBColor(0xd6, 0x27, 0x28),
        (true, false) => RGBColor(0x2c, 0xa0, 0x2c),
        (true, true) => RGBColor(0x94, 0x67, 0xbd),
    }
}

/// Dashed lines for UC, so overlapping lines stay distinguishable in print.
fn dashed(t: &str) -> bool {
    t.ends_with("UC")
}

/// `2048` → "2K", `8 << 20` → "8M".
pub fn size_label(b: u64) -> String {
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

fn num_label(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// XML text escaping.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An axis with chosen grid lines: `bold` (labelled) and `light` ones, on `inner`'s mapping.
struct Keyed<R> {
    inner: R,
    bold: Vec<f64>,
    light: Vec<f64>,
}

/// The latency axis's mapping: logarithmic, or linear when the latencies span little.
enum YMap {
    Log(LogCoord<f64>),
    Linear(RangedCoordf64),
}

impl Ranged for YMap {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        match self {
            YMap::Log(l) => l.map(value, limit),
            YMap::Linear(l) => l.map(value, limit),
        }
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        match self {
            YMap::Log(l) => l.key_points(hint),
            YMap::Linear(l) => l.key_points(hint),
        }
    }

    fn range(&self) -> Range<f64> {
        match self {
            YMap::Log(l) => l.range(),
            YMap::Linear(l) => l.range(),
        }
    }
}

/// Latencies whose largest (p99 included) is at most this times the smallest are drawn on
/// a linear axis: on a log axis they would share one decade's band.
const NARROW: f64 = 3.0;

/// At most this many labelled latency ticks (1, 2 and 5 times the powers of ten); beyond
/// it only the decades (and the lowest tick) are labelled, the others drawn light.
const MAX_Y_LABELS: usize = 16;

/// The largest of 1, 2, 5 times a power of ten that is at most `v`.
fn tick_at_or_below(v: f64) -> f64 {
    let d = 10f64.powi(v.log10().floor() as i32);
    [5.0, 2.0, 1.0]
        .into_iter()
        .map(|m| m * d)
        .find(|t| *t <= v * (1.0 + 1e-9))
        .unwrap_or(d)
}

/// The smallest of 1, 2, 5 times a power of ten that is at least `v`.
fn nice_step(v: f64) -> f64 {
    let d = 10f64.powi(v.log10().floor() as i32);
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * d)
        .find(|t| *t >= v * (1.0 - 1e-9))
        .unwrap_or(10.0 * d)
}

impl<R: Ranged<ValueType = f64>> Ranged for Keyed<R> {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.light.clone()
        } else {
            self.bold.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }
}

/// The chart's geometry, the same for every layer.
#[derive(Clone, Debug)]
struct Geometry {
    height: u32,
    top: u32,
    /// log2 of the smallest and largest size shown.
    xmin: i32,
    xmax: i32,
    /// The latency axis: from a labelled tick under the lowest point to well over the
    /// highest, so the legend (top left) has room above the lines; linear when narrow.
    ylo: f64,
    yhi: f64,
    linear: bool,
}

impl Geometry {
    fn of(plot: &Plot) -> Geometry {
        let (mut xmin, mut xmax, mut ymin, mut ymax) = (i32::MAX, i32::MIN, f64::MAX, 0f64);
        for p in plot.series.iter().flat_map(|s| &s.points) {
            let e = (63 - p.bytes.leading_zeros()) as i32;
            xmin = xmin.min(e);
            xmax = xmax.max(e + i32::from(!p.bytes.is_power_of_two()));
            ymin = ymin.min(p.us);
            ymax = ymax.max(p.us.max(p.p99.unwrap_or(0.0)));
        }
        if xmin > xmax {
            (xmin, xmax, ymin, ymax) = (1, 2, 1.0, 10.0);
        }
        if xmin == xmax {
            xmin = (xmin - 1).max(0);
            xmax += 1;
        }
        let linear = ymax <= ymin * NARROW;
        let (ylo, yhi) = if linear {
            // Room under the lowest point, and above the highest for the legend.
            let span = (ymax - ymin).max(ymin * 0.2);
            let step = nice_step((span * 1.8) / 6.0);
            let lo = ((ymin - 0.15 * span) / step).floor() * step;
            (lo.max(0.0), ymax + 0.8 * span)
        } else {
            (tick_at_or_below(ymin / 1.1), (ymax * 3.0).max(ymin * 10.0))
        };
        let extra = SUBTITLE_LINE * plot.subtitle.len() as u32;
        Geometry {
            height: H + extra,
            top: 44 + extra,
            xmin,
            xmax,
            ylo,
            yhi,
            linear,
        }
    }

    fn x_range(&self) -> Keyed<RangedCoordf64> {
        // Every power of two gets a grid line; labels are thinned to about twelve.
        let step = ((self.xmax - self.xmin + 1) as usize).div_ceil(12).max(1);
        let all: Vec<f64> = (self.xmin..=self.xmax).map(f64::from).collect();
        let labelled: Vec<f64> = all.iter().copied().step_by(step).collect();
        Keyed {
            inner: (f64::from(self.xmin) - PAD..f64::from(self.xmax) + PAD).into(),
            bold: labelled,
            light: all,
        }
    }

    fn y_range(&self) -> Keyed<YMap> {
        let in_range = |v: &f64| *v >= self.ylo * (1.0 - 1e-9) && *v <= self.yhi;
        if self.linear {
            // Evenly spaced labelled ticks, a nice step apart.
            let step = nice_step((self.yhi - self.ylo) / 6.0);
            let first = (self.ylo / step).ceil() as i64;
            let last = (self.yhi / step).floor() as i64;
            let bold: Vec<f64> = (first..=last).map(|k| k as f64 * step).collect();
            return Keyed {
                inner: YMap::Linear((self.ylo..self.yhi).into()),
                bold,
                light: Vec::new(),
            };
        }
        // 1, 2 and 5 times the powers of ten in range, the lowest one under the lowest
        // point: all labelled unless there are too many (RDMA latency spans microseconds
        // to milliseconds), then the decades and the lowest labelled, the others light.
        let (dlo, dhi) = (
            self.ylo.log10().floor() as i32,
            self.yhi.log10().ceil() as i32,
        );
        let all: Vec<f64> = (dlo..=dhi)
            .flat_map(|d| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(d)))
            .filter(in_range)
            .collect();
        let (bold, light) = if all.len() <= MAX_Y_LABELS {
            (all, Vec::new())
        } else {
            let is_decade = |v: &f64| (v.log10() - v.log10().round()).abs() < 1e-9;
            let bold = all
                .iter()
                .copied()
                .enumerate()
                .filter(|(i, v)| *i == 0 || is_decade(v))
                .map(|(_, v)| v)
                .collect();
            (bold, all)
        };
        Keyed {
            inner: YMap::Log((self.ylo..self.yhi).log_scale().into()),
            bold,
            light,
        }
    }
}

type Root<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type Chart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<Keyed<RangedCoordf64>, Keyed<YMap>>>;
type DrawResult = Result<(), String>;

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Draws one layer on a fresh SVG document with the plot's geometry; returns the document.
fn layer<F>(g: &Geometry, draw: F) -> Result<String, String>
where
    F: for<'a, 'b> FnOnce(&'a Root<'b>, &mut Chart<'a, 'b>) -> DrawResult,
{
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (W, g.height)).into_drawing_area();
        let mut chart = ChartBuilder::on(&root)
            .margin_top(g.top)
            .margin_left(12)
            .margin_right(24)
            .margin_bottom(8)
            .x_label_area_size(60)
            .y_label_area_size(64)
            .build_cartesian_2d(g.x_range(), g.y_range())
            .map_err(err)?;
        draw(&root, &mut chart)?;
        root.present().map_err(err)?;
    }
    Ok(s)
}

/// The elements of a layer's document, without its `<svg>` start and end tags, each text
/// element on one line (the backend puts its text on a line of its own, and the newlines
/// would be part of the text content).
fn body(doc: &str) -> String {
    let start = doc.find('>').map_or(0, |i| i + 1);
    let end = doc.rfind("</svg>").unwrap_or(doc.len());
    let inner = doc.get(start..end).unwrap_or("").trim_matches('\n');
    let mut out = String::with_capacity(inner.len());
    let mut lines = inner.lines();
    while let Some(l) = lines.next() {
        out.push_str(l);
        if l.starts_with("<text") && !l.ends_with("/>") {
            for next in lines.by_ref() {
                out.push_str(next);
                if next == "</text>" {
                    break;
                }
            }
        }
        out.push('\n');
    }
    out.truncate(out.trim_end().len());
    out
}

fn x_of(bytes: u64) -> f64 {
    (bytes.max(1) as f64).log2()
}

fn text_style(size: f64, h: HPos) -> TextStyle<'static> {
    TextStyle::from(("sans-serif", size).into_font()).pos(Pos::new(h, VPos::Center))
}

/// The frame: background, title, axes with their grid, labels and titles.
fn frame(plot: &Plot, g: &Geometry) -> Result<String, String> {
    let title = plot.title.clone();
    let linear = g.linear;
    layer(g, |root, chart| {
        root.fill(&WHITE).map_err(err)?;
        root.draw(&Text::new(
            title,
            (W as i32 / 2, 22),
            text_style(19.0, HPos::Center),
        ))
        .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("Message size [bytes] (log2 scale)")
            .y_desc(if linear {
                "Latency t_typical [µs]"
            } else {
                "Latency t_typical [µs] (log scale)"
            })
            .x_label_formatter(&|e| size_label(1u64 << e.round().clamp(0.0, 63.0) as u32))
            .y_label_formatter(&|v| num_label(*v))
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15))
            .bold_line_style(RGBColor(0xbb, 0xbb, 0xbb))
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            .draw()
            .map_err(err)?;
        Ok(())
    })
}

/// The subtitle lines, one `<text>` each.
fn subtitle(plot: &Plot, g: &Geometry) -> Result<String, String> {
    let lines = plot.subtitle.clone();
    layer(g, |root, _| {
        for (i, line) in lines.into_iter().enumerate() {
            let y = 40 + (SUBTITLE_LINE * i as u32) as i32;
            root.draw(&Text::new(
                line,
                (W as i32 / 2, y),
                text_style(12.5, HPos::Center),
            ))
            .map_err(err)?;
        }
        Ok(())
    })
}

/// The smallest and largest sizes sent inline, if any.
fn inline_sizes(plot: &Plot) -> Option<(u64, u64)> {
    let inline = || {
        plot.series
            .iter()
            .flat_map(|s| &s.points)
            .filter(|p| p.inline == Some(true))
            .map(|p| p.bytes)
    };
    Some((inline().min()?, inline().max()?))
}

/// What the band is: the sizes measured with inline sends, not the inline limit (which is
/// at least the largest of them, and below the next size measured without).
pub fn band_label(min: u64, max: u64) -> String {
    let sizes = if min == max {
        format!("the size sent inline here, {max} B")
    } else {
        format!("the sizes sent inline here, {min} B to {max} B")
    };
    format!("shaded: {sizes} (the inline limit -I is at least {max} B)")
}

/// The inline sizes: shaded up to halfway to the next power of two, labelled.
fn band(g: &Geometry, (min, max): (u64, u64)) -> Result<String, String> {
    let right = (x_of(max) + 0.5).min(f64::from(g.xmax) + PAD);
    let left = f64::from(g.xmin) - PAD;
    let (lo, hi) = (g.ylo, g.yhi);
    layer(g, |root, chart| {
        chart
            .plotting_area()
            .draw(&Rectangle::new(
                [(left, lo), (right, hi)],
                RGBColor(0x80, 0x80, 0x80).mix(0.12).filled(),
            ))
            .map_err(err)?;
        // The label under the shaded sizes, between the size labels and the axis title,
        // where no point can hide it.
        let (x, y) = chart.backend_coord(&(left, lo));
        root.draw(&Text::new(
            band_label(min, max),
            (x + 4, y + 36),
            ("sans-serif", 13.0)
                .into_font()
                .color(&RGBColor(0x55, 0x55, 0x55))
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(err)?;
        Ok(())
    })
}

/// One series: its line, p99 whiskers and points, each point with a tooltip and, when known,
/// `class="inline"` (filled) or `class="not-inline"` (hollow).
fn series(s: &Series, g: &Geometry) -> Result<String, String> {
    let c = colour(&s.name);
    let pts = s.points.clone();
    let line = layer(g, |_, chart| {
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|p| (x_of(p.bytes), p.us)),
                c.stroke_width(2),
            ))
            .map_err(err)?;
        Ok(())
    })?;
    let mut line = body(&line);
    if dashed(&s.name) {
        line = line.replace("<polyline ", "<polyline stroke-dasharray=\"6 3\" ");
    }
    let pts = s.points.clone();
    let whiskers = layer(g, |_, chart| {
        for p in &pts {
            if let Some(top) = p.p99.filter(|&t| t > p.us && t.is_finite()) {
                let x = x_of(p.bytes);
                let cap = 0.12;
                chart
                    .draw_series([
                        PathElement::new(vec![(x, p.us), (x, top)], c.stroke_width(1)),
                        PathElement::new(vec![(x - cap, top), (x + cap, top)], c.stroke_width(1)),
                    ])
                    .map_err(err)?;
            }
        }
        Ok(())
    })?;
    let pts = s.points.clone();
    let marks = layer(g, |_, chart| {
        chart
            .draw_series(pts.iter().map(|p| {
                let style = if p.inline == Some(false) {
                    c.stroke_width(2)
                } else {
                    c.filled().stroke_width(2)
                };
                Circle::new((x_of(p.bytes), p.us), 4, style)
            }))
            .map_err(err)?;
        Ok(())
    })?;
    let marks = body(&marks);
    let circles: Vec<&str> = marks.lines().filter(|l| l.starts_with("<circle")).collect();
    let mut out = format!(
        "<g class=\"series\" data-transport=\"{}\">\n{line}\n<g class=\"p99\">\n{}\n</g>\n",
        escape(&s.name),
        body(&whiskers)
    );
    if circles.len() == s.points.len() {
        for (p, l) in s.points.iter().zip(circles) {
            let (class, how, l) = match p.inline {
                Some(true) => (" class=\"inline\"", ", inline", l.to_string()),
                Some(false) => (
                    " class=\"not-inline\"",
                    ", not inline",
                    l.replace("fill=\"none\"", "fill=\"white\""),
                ),
                None => ("", "", l.to_string()),
            };
            let p99 = p.p99.map_or(String::new(), |v| format!(", p99 {v:.3} µs"));
            let open = l.trim_end().trim_end_matches("/>").trim_end();
            let open = open.replacen("<circle", &format!("<circle{class}"), 1);
            out.push_str(&format!(
                "{open}><title>{} {} B{how}: {:.3} µs{p99}</title></circle>\n",
                escape(&s.name),
                p.bytes,
                p.us
            ));
        }
    } else {
        out.push_str(&marks);
        out.push('\n');
    }
    out.push_str("</g>\n");
    Ok(out)
}

/// What a whisker is, in the legend.
pub const WHISKER_LABEL: &str = "whisker: up to the size's 99th percentile (p99)";

/// The legend: one entry per series, then what filled and hollow markers and the whiskers
/// mean.
fn legend(plot: &Plot, g: &Geometry) -> Result<String, String> {
    let names: Vec<String> = plot.series.iter().map(|s| s.name.clone()).collect();
    let marks = plot
        .series
        .iter()
        .flat_map(|s| &s.points)
        .any(|p| p.inline.is_some());
    let whiskers = plot
        .series
        .iter()
        .flat_map(|s| &s.points)
        .any(|p| p.p99.is_some_and(|t| t > p.us && t.is_finite()));
    layer(g, |_, chart| {
        let none = || std::iter::empty::<(f64, f64)>();
        for name in names {
            let c = colour(&name);
            let s = chart
                .draw_series(LineSeries::new(none(), c.stroke_width(2)))
                .map_err(err)?
                .label(name.clone());
            if dashed(&name) {
                s.legend(move |(x, y)| {
                    DashedPathElement::new(vec![(x, y), (x + 24, y)], 6, 3, c.stroke_width(2))
                });
            } else {
                s.legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(2))
                });
            }
        }
        if marks {
            let grey = RGBColor(0x44, 0x44, 0x44);
            chart
                .draw_series(LineSeries::new(none(), grey))
                .map_err(err)?
                .label("inline: payload copied into the WQE")
                .legend(move |(x, y)| Circle::new((x + 12, y), 4, grey.filled()));
            chart
                .draw_series(LineSeries::new(none(), grey))
                .map_err(err)?
                .label("not inline: payload fetched by DMA")
                .legend(move |(x, y)| Circle::new((x + 12, y), 4, grey.stroke_width(2)));
        }
        if whiskers {
            let grey = RGBColor(0x44, 0x44, 0x44);
            chart
                .draw_series(LineSeries::new(none(), grey))
                .map_err(err)?
                .label(WHISKER_LABEL)
                .legend(move |(x, y)| {
                    EmptyElement::at((x + 12, y))
                        + PathElement::new(vec![(0, 6), (0, -6)], grey)
                        + PathElement::new(vec![(-4, -6), (4, -6)], grey)
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 14))
            .background_style(WHITE)
            .border_style(RGBColor(0x99, 0x99, 0x99))
            .draw()
            .map_err(err)?;
        Ok(())
    })
}

fn render(plot: &Plot) -> Result<String, String> {
    let g = Geometry::of(plot);
    let frame = frame(plot, &g)?;
    let start = frame.find('>').map_or(0, |i| i + 1);
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    s.push_str(&frame[..start]);
    s.push_str(&format!("\n<title>{}</title>\n", escape(&plot.title)));
    if let Some(m) = &plot.metadata {
        s.push_str(&format!(
            "<metadata id=\"provenance\">{}</metadata>\n",
            escape(m)
        ));
    }
    let frame_body = body(&frame);
    let (background, rest) = match frame_body.split_once('\n') {
        Some((bg, rest)) if bg.starts_with("<rect") => (bg, rest),
        _ => ("", frame_body.as_str()),
    };
    s.push_str(background);
    s.push('\n');
    s.push_str(&format!("<g class=\"frame\">\n{rest}\n</g>\n"));
    // Over the grid, translucent, so the grid shows through and its label is not crossed.
    if let Some(sizes) = inline_sizes(plot) {
        s.push_str(&format!(
            "<g class=\"inline-band\">\n{}\n</g>\n",
            body(&band(&g, sizes)?)
        ));
    }
    let sub = subtitle(plot, &g)?;
    for l in body(&sub).lines() {
        s.push_str(&l.replacen("<text", "<text class=\"subtitle\"", 1));
        s.push('\n');
    }
    for ser in &plot.series {
        s.push_str(&series(ser, &g)?);
    }
    s.push_str(&format!(
        "<g class=\"legend\">\n{}\n</g>\n</svg>\n",
        body(&legend(plot, &g)?)
    ));
    Ok(s)
}

/// The plot as an SVG document. Drawing errors (none are expected: every layer draws in
/// memory) give a document that shows the error instead of the plot.
pub fn svg(plot: &Plot) -> String {
    render(plot).unwrap_or_else(|e| {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\">\n<title>{t}</title>\n<text x=\"20\" y=\"40\">{t}: drawing failed: {e}</text>\n</svg>\n",
            t = escape(&plot.title),
            e = escape(&e)
        )
    })
}

/// One size's round trip in its parts, microseconds (medians); they add up to the RTT.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stack {
    pub bytes: u64,
    /// The client's post (up to the BlueFlame/doorbell store).
    pub post: f64,
    /// The rest of the round trip: wires and NICs both ways, the peer's and the client's
    /// waits for the completions.
    pub wire_nic: f64,
    /// The peer's own turnaround (0 when its HCA answers: read, atomic).
    pub peer: f64,
}

/// One panel: a test, transport and completion mode.
#[derive(Clone, Debug, PartialEq)]
pub struct StackGroup {
    pub name: String,
    pub stacks: Vec<Stack>,
}

/// The whole anatomy plot.
#[derive(Clone, Debug, Default)]
pub struct StackedPlot {
    pub title: String,
    pub subtitle: Vec<String>,
    pub metadata: Option<String>,
    pub groups: Vec<StackGroup>,
}

/// The parts of a stack, bottom up: class, legend text, colour.
const PARTS: [(&str, &str, RGBColor); 3] = [
    (
        "post",
        "post (to the doorbell store)",
        RGBColor(0x1f, 0x77, 0xb4),
    ),
    (
        "wire-nic",
        "wire + NICs, both ways",
        RGBColor(0xff, 0x7f, 0x0e),
    ),
    ("peer", "peer turnaround", RGBColor(0x2c, 0xa0, 0x2c)),
];

const PANEL_H: u32 = 300;

fn stacked(plot: &StackedPlot) -> Result<String, String> {
    let top = 50 + SUBTITLE_LINE * plot.subtitle.len() as u32 + 24;
    let height = top + PANEL_H * plot.groups.len().max(1) as u32;
    let mut bars = String::new();
    let mut doc = String::new();
    {
        let root = SVGBackend::with_string(&mut doc, (W, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        root.draw(&Text::new(
            plot.title.clone(),
            (W as i32 / 2, 22),
            text_style(19.0, HPos::Center),
        ))
        .map_err(err)?;
        for (i, line) in plot.subtitle.iter().enumerate() {
            let y = 40 + (SUBTITLE_LINE * i as u32) as i32;
            root.draw(&Text::new(
                line.clone(),
                (W as i32 / 2, y),
                text_style(12.5, HPos::Center),
            ))
            .map_err(err)?;
        }
        let (_, below) = root.split_vertically(top);
        let panels = below.split_evenly((plot.groups.len().max(1), 1));
        for (g, area) in plot.groups.iter().zip(&panels) {
            let n = g.stacks.len().max(1);
            // Room for at least four bars, so one or two stay bars, centred.
            let pad = (4.0 - n as f64).max(0.0) / 2.0;
            let ymax = g
                .stacks
                .iter()
                .map(|s| s.post + s.wire_nic + s.peer)
                .filter(|v| v.is_finite())
                .fold(0.0f64, f64::max);
            let ymax = if ymax > 0.0 { ymax * 1.1 } else { 1.0 };
            let labels: Vec<String> = g.stacks.iter().map(|s| size_label(s.bytes)).collect();
            let mut chart = ChartBuilder::on(area)
                .caption(g.name.clone(), ("sans-serif", 15))
                .margin_left(12)
                .margin_right(24)
                .margin_bottom(8)
                .x_label_area_size(40)
                .y_label_area_size(64)
                .build_cartesian_2d(-0.5 - pad..n as f64 - 0.5 + pad, 0.0..ymax)
                .map_err(err)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels((n as f64 + 2.0 * pad) as usize + 1)
                .x_label_formatter(&|v| {
                    let i = v.round();
                    if (v - i).abs() < 1e-6 && i >= 0.0 {
                        labels.get(i as usize).cloned().unwrap_or_default()
                    } else {
                        String::new()
                    }
                })
                .y_label_formatter(&|v| num_label(*v))
                .x_desc("Message size [bytes]")
                .y_desc("Round trip, median [µs]")
                .label_style(("sans-serif", 13))
                .axis_desc_style(("sans-serif", 14))
                .bold_line_style(RGBColor(0xbb, 0xbb, 0xbb))
                .light_line_style(RGBColor(0xee, 0xee, 0xee))
                .draw()
                .map_err(err)?;
            // The bars in the chart's own pixels, written as classed elements below.
            for (i, st) in g.stacks.iter().enumerate() {
                bars.push_str(&format!(
                    "<g class=\"stack\" data-group=\"{}\" data-bytes=\"{}\">\n",
                    escape(&g.name),
                    st.bytes
                ));
                let mut base = 0.0;
                for ((class, _, c), v) in PARTS.iter().zip([st.post, st.wire_nic, st.peer]) {
                    let v = if v.is_finite() { v.max(0.0) } else { 0.0 };
                    let x = i as f64;
                    let (x0, y0) = chart.backend_coord(&(x - 0.35, base + v));
                    let (x1, y1) = chart.backend_coord(&(x + 0.35, base));
                    bars.push_str(&format!(
                        "<rect class=\"{class}\" data-us=\"{v:.4}\" x=\"{x0}\" y=\"{y0}\" width=\"{}\" height=\"{}\" fill=\"#{:02X}{:02X}{:02X}\"><title>{} {} B, {class}: {v:.3} µs</title></rect>\n",
                        x1 - x0,
                        y1 - y0,
                        c.0,
                        c.1,
                        c.2,
                        escape(&g.name),
                        st.bytes
                    ));
                    base += v;
                }
                bars.push_str("</g>\n");
            }
        }
        root.present().map_err(err)?;
    }
    let start = doc.find('>').map_or(0, |i| i + 1);
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    s.push_str(&doc[..start]);
    s.push_str(&format!("\n<title>{}</title>\n", escape(&plot.title)));
    if let Some(m) = &plot.metadata {
        s.push_str(&format!(
            "<metadata id=\"provenance\">{}</metadata>\n",
            escape(m)
        ));
    }
    s.push_str(&format!("<g class=\"frame\">\n{}\n</g>\n", body(&doc)));
    s.push_str(&bars);
    // The legend, one line under the subtitle.
    s.push_str("<g class=\"legend\">\n");
    let y = top as i32 - 14;
    for (i, (class, text, c)) in PARTS.iter().enumerate() {
        let x = 40 + 230 * i as i32;
        s.push_str(&format!(
            "<rect class=\"{class}\" x=\"{x}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"#{:02X}{:02X}{:02X}\"/>\n<text x=\"{}\" y=\"{}\" font-family=\"sans-serif\" font-size=\"12\">{}</text>\n",
            y - 6,
            c.0,
            c.1,
            c.2,
            x + 16,
            y + 4,
            escape(text)
        ));
    }
    s.push_str("</g>\n</svg>\n");
    Ok(s)
}

/// The anatomy plot as an SVG document: per panel (test, transport, completion) and size, a
/// bar of the median round trip stacked from the post, the wire and NICs, and the peer's
/// turnaround; each part a `<rect class="post|wire-nic|peer" data-us=...>` inside a
/// `<g class="stack" data-bytes=...>`. Drawing errors give a document that shows them.
pub fn stacked_svg(plot: &StackedPlot) -> String {
    stacked(plot).unwrap_or_else(|e| {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\">\n<title>{t}</title>\n<text x=\"20\" y=\"40\">{t}: drawing failed: {e}</text>\n</svg>\n",
            t = escape(&plot.title),
            e = escape(&e)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(bytes: u64, us: f64, inline: Option<bool>) -> Point {
        Point {
            bytes,
            us,
            p99: Some(us * 1.5),
            inline,
        }
    }

    #[test]
    fn layers_share_geometry_and_are_grouped() {
        let plot = Plot {
            title: "t <&>".into(),
            subtitle: vec!["one".into(), "two".into()],
            metadata: Some("{\"a\":\"<b>\"}".into()),
            series: vec![
                Series {
                    name: "UD".into(),
                    points: vec![pt(2, 1.0, Some(true)), pt(4096, 3.0, Some(false))],
                },
                Series {
                    name: "UC".into(),
                    points: vec![
                        pt(2, 1.2, None),
                        pt(64, 1.4, None),
                        pt(8 << 20, 900.0, None),
                    ],
                },
            ],
        };
        let svg = svg(&plot);
        let doc = roxmltree::Document::parse(&svg).expect("well-formed");
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "svg");
        let meta = root
            .descendants()
            .find(|n| n.attribute("id") == Some("provenance"))
            .and_then(|n| n.text());
        assert_eq!(meta, Some("{\"a\":\"<b>\"}"));
        let series: Vec<_> = root
            .descendants()
            .filter(|n| n.attribute("class") == Some("series"))
            .collect();
        assert_eq!(series.len(), 2);
        let uc = series[1];
        assert_eq!(uc.attribute("data-transport"), Some("UC"));
        let line = uc
            .descendants()
            .find(|n| n.tag_name().name() == "polyline")
            .unwrap();
        assert_eq!(line.attribute("stroke-dasharray"), Some("6 3"));
        assert_eq!(
            line.attribute("points").unwrap().split_whitespace().count(),
            3
        );
        // The points sit on the line: same pixel coordinates.
        let circles: Vec<_> = uc
            .children()
            .filter(|n| n.tag_name().name() == "circle")
            .map(|n| {
                format!(
                    "{},{}",
                    n.attribute("cx").unwrap(),
                    n.attribute("cy").unwrap()
                )
            })
            .collect();
        let on_line: Vec<_> = line
            .attribute("points")
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(circles, on_line);
        // The 8M point is the highest and rightmost: larger x, smaller y.
        let xy: Vec<(f64, f64)> = circles
            .iter()
            .map(|c| {
                let (x, y) = c.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect();
        assert!(xy[2].0 > xy[1].0 && xy[2].1 < xy[1].1, "{xy:?}");
        let ud = series[0];
        let not_inline = ud
            .descendants()
            .find(|n| n.attribute("class") == Some("not-inline"))
            .unwrap();
        assert_eq!(not_inline.attribute("fill"), Some("white"));
        assert!(ud
            .descendants()
            .any(|n| n.attribute("class") == Some("inline")));
        let whiskers = ud
            .descendants()
            .find(|n| n.attribute("class") == Some("p99"))
            .unwrap();
        assert_eq!(
            whiskers
                .children()
                .filter(|n| n.tag_name().name() == "polyline")
                .count(),
            4,
            "two whiskers with their caps"
        );
        let texts: Vec<&str> = root.descendants().filter_map(|n| n.text()).collect();
        for t in [
            "t <&>",
            "one",
            "two",
            "2",
            "8M",
            "UD",
            "UC",
            "shaded: the size sent inline here, 2 B (the inline limit -I is at least 2 B)",
        ] {
            assert!(texts.contains(&t), "{t}: {texts:?}");
        }
        assert!(texts.iter().any(|t| t.starts_with("inline: payload")));
    }

    #[test]
    fn no_series_still_gives_a_valid_document() {
        let svg = svg(&Plot {
            title: "empty".into(),
            ..Plot::default()
        });
        roxmltree::Document::parse(&svg).unwrap();
        assert!(svg.contains("<title>empty</title>"));
    }

    #[test]
    fn anatomy_bars_stack_their_parts_to_the_round_trip() {
        let plot = StackedPlot {
            title: "anatomy <t>".into(),
            subtitle: vec!["EMULATED".into()],
            metadata: Some("{}".into()),
            groups: vec![
                StackGroup {
                    name: "send_lat UD poll".into(),
                    stacks: vec![
                        Stack {
                            bytes: 2,
                            post: 0.1,
                            wire_nic: 1.5,
                            peer: 0.4,
                        },
                        Stack {
                            bytes: 4096,
                            post: 0.1,
                            wire_nic: 3.5,
                            peer: 0.4,
                        },
                    ],
                },
                StackGroup {
                    name: "read_lat RC poll".into(),
                    stacks: vec![Stack {
                        bytes: 64,
                        post: 0.2,
                        wire_nic: 2.0,
                        peer: 0.0,
                    }],
                },
            ],
        };
        let svg = stacked_svg(&plot);
        let doc = roxmltree::Document::parse(&svg).expect("well-formed");
        let root = doc.root_element();
        assert!(svg.contains("<title>anatomy &lt;t&gt;</title>"));
        let stacks: Vec<_> = root
            .descendants()
            .filter(|n| n.attribute("class") == Some("stack"))
            .collect();
        assert_eq!(stacks.len(), 3);
        assert_eq!(stacks[1].attribute("data-bytes"), Some("4096"));
        assert_eq!(stacks[2].attribute("data-group"), Some("read_lat RC poll"));
        let num = |n: roxmltree::Node, a: &str| -> f64 { n.attribute(a).unwrap().parse().unwrap() };
        for st in &stacks {
            let rects: Vec<_> = st
                .children()
                .filter(|n| n.tag_name().name() == "rect")
                .collect();
            let classes: Vec<_> = rects
                .iter()
                .map(|r| r.attribute("class").unwrap())
                .collect();
            assert_eq!(classes, ["post", "wire-nic", "peer"]);
            // Bottom up, touching: each part's top is the next one's bottom.
            for w in rects.windows(2) {
                assert!((num(w[0], "y") - (num(w[1], "y") + num(w[1], "height"))).abs() <= 1.0);
            }
        }
        // Heights are proportional to the times within a panel: 4096's wire+NIC (3.5 µs) is
        // 35 times the post (0.1 µs), give or take a pixel of rounding.
        let r: Vec<_> = stacks[1]
            .children()
            .filter(|n| n.tag_name().name() == "rect")
            .collect();
        let (post, wire) = (num(r[0], "height"), num(r[1], "height"));
        assert!((wire / post - 35.0).abs() < 35.0 * 0.2, "{post} {wire}");
        assert_eq!(num(r[1], "data-us"), 3.5);
        // The larger size's bar is taller (its top is higher up: smaller y).
        let top = |st: roxmltree::Node| {
            st.children()
                .filter(|n| n.tag_name().name() == "rect")
                .map(|n| num(n, "y"))
                .fold(f64::MAX, f64::min)
        };
        assert!(top(stacks[1]) < top(stacks[0]));
        let texts: Vec<&str> = root.descendants().filter_map(|n| n.text()).collect();
        for t in [
            "EMULATED",
            "send_lat UD poll",
            "read_lat RC poll",
            "peer turnaround",
            "4K",
        ] {
            assert!(texts.iter().any(|x| x.contains(t)), "{t}: {texts:?}");
        }
        // No data: still a valid document.
        let empty = stacked_svg(&StackedPlot {
            title: "none".into(),
            ..StackedPlot::default()
        });
        roxmltree::Document::parse(&empty).unwrap();
    }

    /// The latency axis's labelled ticks: (value, pixel y), from the frame's right-aligned
    /// texts.
    fn y_labels(svg: &str) -> Vec<(f64, f64)> {
        let doc = roxmltree::Document::parse(svg).expect("well-formed");
        let frame = doc
            .descendants()
            .find(|n| n.attribute("class") == Some("frame"))
            .unwrap();
        let mut v: Vec<(f64, f64)> = frame
            .descendants()
            .filter(|n| n.tag_name().name() == "text" && n.attribute("text-anchor") == Some("end"))
            .filter_map(|n| {
                let value = n.text()?.trim().parse().ok()?;
                Some((value, n.attribute("y")?.parse().ok()?))
            })
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    }

    /// The pixel y of each point, lowest latency first.
    fn point_ys(svg: &str) -> Vec<f64> {
        let doc = roxmltree::Document::parse(svg).unwrap();
        let mut v: Vec<f64> = doc
            .descendants()
            .filter(|n| n.tag_name().name() == "circle")
            .filter(|n| {
                n.ancestors()
                    .any(|a| a.attribute("class") == Some("series"))
            })
            .map(|n| n.attribute("cy").unwrap().parse().unwrap())
            .collect();
        v.sort_by(|a, b| b.total_cmp(a));
        v
    }

    fn plot_of(latencies: &[(u64, f64)]) -> Plot {
        Plot {
            title: "t".into(),
            series: vec![Series {
                name: "UC".into(),
                points: latencies
                    .iter()
                    .map(|&(b, us)| pt(b, us, Some(b <= 128)))
                    .collect(),
            }],
            ..Plot::default()
        }
    }

    #[test]
    fn the_lowest_points_sit_between_labelled_ticks_over_a_wide_range() {
        // A UC sweep under emulation: 20-30 µs for the small sizes, 30 ms at 8 MiB.
        let sweep: Vec<(u64, f64)> = (1..=23)
            .map(|e| {
                let b = 1u64 << e;
                (b, 20.0 + e as f64 * 0.4 + b as f64 * 3.5e-3)
            })
            .collect();
        let svg = svg(&plot_of(&sweep));
        let labels = y_labels(&svg);
        let values: Vec<f64> = labels.iter().map(|l| l.0).collect();
        // A labelled tick under the lowest point and one within a 1-2-5 step above it,
        // not a first label at 100 with the 20-30 µs points under it.
        assert!(values[0] <= 20.0, "{values:?}");
        assert!(values.iter().any(|&v| v > 20.8 && v <= 50.0), "{values:?}");
        let lowest_point = point_ys(&svg)[0];
        assert!(labels[0].1 >= lowest_point, "{labels:?} {lowest_point}");
        // Log scale: a decade takes the same height everywhere.
        let y = |v: f64| labels.iter().find(|l| l.0 == v).unwrap().1;
        assert!(((y(10.0) - y(100.0)) - (y(1000.0) - y(10000.0))).abs() <= 1.0);
        assert!(svg.contains("(log scale)"));
    }

    #[test]
    fn a_narrow_range_gets_a_linear_axis() {
        // A UD sweep: 2 B to 2 KiB within 20-30 µs.
        let sweep: Vec<(u64, f64)> = (1..=11).map(|e| (1u64 << e, 20.0 + e as f64)).collect();
        let mut plot = plot_of(&sweep);
        for p in &mut plot.series[0].points {
            p.p99 = Some(p.us + 1.0);
        }
        let svg = svg(&plot);
        let labels = y_labels(&svg);
        let inside: Vec<f64> = labels
            .iter()
            .map(|l| l.0)
            .filter(|v| (20.0..=31.0).contains(v))
            .collect();
        assert!(inside.len() >= 3, "ticks among the points: {labels:?}");
        // Evenly spaced in value and on the page.
        for w in labels.windows(3) {
            let (dv0, dv1) = (w[1].0 - w[0].0, w[2].0 - w[1].0);
            let (dy0, dy1) = (w[0].1 - w[1].1, w[1].1 - w[2].1);
            assert!(
                (dv0 - dv1).abs() < 1e-9 && (dy0 - dy1).abs() <= 1.0,
                "{labels:?}"
            );
        }
        assert!(!svg.contains("(log scale)") && svg.contains("Latency t_typical [µs]"));
        // Every point between the lowest and highest labelled tick.
        let ys = point_ys(&svg);
        let (low, high) = (labels[0].1, labels[labels.len() - 1].1);
        assert!(
            ys.iter().all(|&y| y <= low && y >= high),
            "{ys:?} {labels:?}"
        );
    }

    #[test]
    fn the_legend_says_what_whiskers_and_the_band_are() {
        let svg = svg(&plot_of(&[(2, 1.0), (64, 1.1), (128, 1.2), (256, 2.0)]));
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let texts_in = |class: &str| -> Vec<String> {
            doc.descendants()
                .filter(|n| n.attribute("class") == Some(class))
                .flat_map(|g| g.descendants().filter_map(|n| n.text()).map(str::to_string))
                .collect()
        };
        assert!(texts_in("legend").iter().any(|t| t == WHISKER_LABEL));
        let band = texts_in("inline-band");
        assert!(
            band.iter().any(|t| t
                == "shaded: the sizes sent inline here, 2 B to 128 B (the inline limit -I is at least 128 B)"),
            "{band:?}"
        );
        // No whisker above its point: no whisker in the legend.
        let mut flat = plot_of(&[(2, 1.0), (4, 1.1)]);
        for p in &mut flat.series[0].points {
            p.p99 = Some(p.us);
        }
        assert!(!super::svg(&flat).contains(WHISKER_LABEL));
    }
}
