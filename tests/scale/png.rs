//! SVG text → PNG bytes, rendered in-process by resvg with the machine's own fonts (fontdb reads
//! the font directories itself: no fontconfig library, no external converter). Text needs at
//! least one font installed (Debian's `fonts-dejavu-core` is on every machine of this project);
//! without one the picture would have no labels, so that is an error rather than a silent PNG.

/// Renders `svg` at `zoom` × its own size.
pub fn render(svg: &str, zoom: f32) -> Result<Vec<u8>, String> {
    let mut opt = resvg::usvg::Options::default();
    let fonts = opt.fontdb_mut();
    fonts.load_system_fonts();
    if fonts.is_empty() {
        return Err("no font found for the chart's text (install fonts-dejavu-core)".to_owned());
    }
    let tree =
        resvg::usvg::Tree::from_str(svg, &opt).map_err(|e| format!("chart SVG rejected: {e}"))?;
    let size = tree
        .size()
        .to_int_size()
        .scale_by(zoom)
        .ok_or("chart too small")?;
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| format!("cannot allocate a {size:?} picture"))?;
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::from_scale(zoom, zoom),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().map_err(|e| format!("encode PNG: {e}"))
}
