//! The pictures of BENCHMARKS.md that the bench binary draws itself: the
//! distribution of call latency under contention, one panel on one host and
//! one across two hosts. (The flame graph is drawn by `bench/run`, from
//! `perf`, with inferno.)
//!
//! Drawn with plotters' SVG backend without its font features: text is
//! written as SVG text for the viewer's font, so nothing of the system is
//! needed, and plotters is already in the workspace's lock file through
//! criterion.

use std::path::Path;

use plotters::prelude::*;

use crate::contended::System;
use crate::stats::{Cdf, MILLIS};

/// The file the latency picture is written to, in the directory given with
/// `--figures`.
pub const LATENCY_CDF: &str = "latency-cdf.svg";

/// The picture's size in pixels: two panels side by side, each wide enough
/// for three decades of latency.
const SIZE: (u32, u32) = (1200, 500);

/// How far below the fastest call the x axis starts: the legend sits in
/// the upper left, where no curve can be, since every curve starts at a
/// call's latency.
const LEGEND_ROOM: f64 = 4.0;

/// One panel: its title, and each system's distribution.
pub struct Panel {
    pub title: String,
    pub curves: Vec<(System, Cdf)>,
}

/// The systems' colours, the same in every panel (single-flight's is the
/// strongest).
fn colour(system: System) -> RGBColor {
    match system {
        System::SingleFlight => RGBColor(31, 119, 180),
        #[cfg(feature = "cluster")]
        System::Cluster => RGBColor(31, 119, 180),
        // Purple: single-flight too, with a hop more.
        #[cfg(feature = "cluster")]
        System::ClusterTier => RGBColor(148, 103, 189),
        System::Flock => RGBColor(255, 127, 14),
        System::Redis => RGBColor(214, 39, 40),
        // Grey: not a peer, the least the shape needs.
        System::Floor => RGBColor(127, 127, 127),
        #[cfg(feature = "cluster")]
        System::EtcdLock => RGBColor(44, 160, 44),
    }
}

fn label(system: System) -> &'static str {
    match system {
        #[cfg(feature = "cluster")]
        System::Cluster => "single-flight",
        #[cfg(feature = "cluster")]
        System::ClusterTier => "single-flight, host tier",
        #[cfg(feature = "cluster")]
        System::EtcdLock => "etcd lock",
        other => other.name(),
    }
}

/// Writes the CDFs of call latency, one panel each, to `path`; the panels
/// without a curve are left out.
pub fn latency_cdf(path: &Path, panels: &[Panel]) -> Result<(), String> {
    let panels: Vec<&Panel> = panels
        .iter()
        .filter(|p| p.curves.iter().any(|(_, c)| !c.quantiles.is_empty()))
        .collect();
    if panels.is_empty() {
        return Err("no contended run measured a latency".into());
    }
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    // One x axis for every panel, so that the panels compare at a glance:
    // it spans every curve, in milliseconds, on a log scale (single-flight's
    // calls take a few ms, flock's tail and etcd's lock a hundred).
    let values = || {
        panels
            .iter()
            .flat_map(|p| &p.curves)
            .flat_map(|(_, cdf)| cdf.quantiles.iter().map(|v| v / MILLIS))
            .filter(|v| *v > 0.0)
    };
    let low = values().fold(f64::INFINITY, f64::min) / LEGEND_ROOM;
    let high = values().fold(0.0, f64::max) * 1.1;
    let areas = root.split_evenly((1, panels.len()));
    for (panel, area) in panels.iter().zip(&areas) {
        draw_panel(panel, area, low..high).map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}

/// One panel, its x axis `milliseconds` on a log scale.
fn draw_panel<DB: DrawingBackend>(
    panel: &Panel,
    area: &DrawingArea<DB, plotters::coord::Shift>,
    milliseconds: std::ops::Range<f64>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(milliseconds.log_scale(), 0.0..1.0)?;
    chart
        .configure_mesh()
        .x_desc("call latency (ms, log scale)")
        .y_desc("fraction of calls at or below")
        // Decades below 1 ms need their decimals, those above none.
        .x_label_formatter(&|v| match *v {
            v if v >= 1.0 => format!("{v:.0}"),
            v => format!("{v:.2}"),
        })
        .y_label_formatter(&|v| format!("{v:.1}"))
        .draw()?;
    for (system, cdf) in &panel.curves {
        let colour = colour(*system);
        chart
            .draw_series(LineSeries::new(
                cdf.points()
                    .map(|(value, fraction)| (value / MILLIS, fraction)),
                colour.stroke_width(2),
            ))?
            .label(label(*system))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
}
