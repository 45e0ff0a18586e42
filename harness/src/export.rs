//! The one seam through which the sweep and the IO benchmark write their run
//! directories: tables (`results.json` + `results.csv`), JSON documents, text
//! (Markdown), charts (SVG and PNG from one drawing function) and the `latest`
//! symlink. Every file is written to a temporary name and renamed into place, so a
//! reader (or an interrupted run) sees the old file or the new one, never a torn one.
//!
//! Chart text is drawn with the DejaVu Sans font embedded in the binary and
//! registered here as `sans-serif` (plotters' `ab_glyph` backend never reads system
//! fonts), so the charts render on headless machines without fontconfig.

use std::path::Path;
use std::sync::Once;

use anyhow::{anyhow, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;

/// Writes `bytes` to `path` atomically: a temporary file in the same directory,
/// fsync, then `rename` over the target. Readers see the old or the new file, never
/// a torn one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_at(path, bytes, 0)
}

/// [`write_atomic`] after following `links` symbolic links (at most 40, as `ELOOP`).
fn write_atomic_at(path: &Path, bytes: &[u8], links: usize) -> Result<()> {
    use std::io::Write;
    // Only a regular file (or nothing) is ever replaced: a link is followed and its
    // target replaced; a device (`/dev/null`, `/dev/stdout`) is written through; a FIFO,
    // socket or directory is refused. A rename over any of those would destroy it.
    if let Ok(m) = std::fs::symlink_metadata(path) {
        let ft = m.file_type();
        if ft.is_symlink() {
            anyhow::ensure!(links < 40, "{}: too many levels of links", path.display());
            let t = std::fs::read_link(path)
                .with_context(|| format!("cannot read link {}", path.display()))?;
            let target = match path.parent() {
                Some(d) if t.is_relative() => d.join(t),
                _ => t,
            };
            return write_atomic_at(&target, bytes, links + 1);
        }
        use std::os::unix::fs::FileTypeExt;
        if ft.is_char_device() || ft.is_block_device() {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            return f
                .write_all(bytes)
                .with_context(|| format!("cannot write {}", path.display()));
        }
        if !ft.is_file() {
            anyhow::bail!(
                "{} is not a regular file (a directory, FIFO or socket): not replaced",
                path.display()
            );
        }
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    let written = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        // A full disk may only show here (delayed allocation); a filesystem without
        // fsync (EINVAL) is not an error.
        match f.sync_all() {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
            r => r,
        }
    })();
    // On failure the old file stays as it was and the temporary goes.
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| {
            format!(
                "cannot write {} (through {}; the old file, if any, is unchanged)",
                path.display(),
                tmp.display()
            )
        });
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::Error::new(e).context(format!(
            "cannot rename {} to {}",
            tmp.display(),
            path.display()
        ))
    })
}

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// Registers the embedded font as `sans-serif` (idempotent). Runs before any chart
/// is drawn, for SVG too (plotters needs the metrics to lay text out).
pub fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
            .map_err(|_| ())
            .expect("embedded DejaVuSans.ttf is a valid font");
    });
}

/// Writes `value` as pretty JSON to `path`.
pub fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<()> {
    write_atomic(path, serde_json::to_string_pretty(value)?.as_bytes())
}

/// Writes `text` (e.g. a Markdown report) to `path`.
pub fn write_text(path: &Path, text: &str) -> Result<()> {
    write_atomic(path, text.as_bytes())
}

/// Writes a result table: `rows` as `dir/results.json` and `csv` (the same rows,
/// already laid out by the caller's column list) as `dir/results.csv`.
pub fn write_table<T: Serialize>(dir: &Path, rows: &[T], csv: &[u8]) -> Result<()> {
    write_json(&dir.join("results.json"), rows)?;
    write_atomic(&dir.join("results.csv"), csv)
}

/// A chart drawn the same way on any plotters backend.
pub trait Chart {
    /// Draws the whole chart on `root`.
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static;
}

/// Writes `chart` as `dir/<stem>.svg` and `dir/<stem>.png`, `size` pixels.
pub fn write_chart(dir: &Path, stem: &str, size: (u32, u32), chart: &impl Chart) -> Result<()> {
    register_font();
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, size).into_drawing_area();
        chart.draw(root.clone())?;
        root.present().map_err(|e| anyhow!("chart: {e:?}"))?;
    }
    write_atomic(&dir.join(format!("{stem}.svg")), s.as_bytes())?;
    // The bitmap encoder picks the format from the extension, so the temporary file
    // keeps `.png`.
    let tmp = dir.join(format!(".{stem}.tmp{}.png", std::process::id()));
    let png = dir.join(format!("{stem}.png"));
    let written = (|| -> Result<()> {
        let root = BitMapBackend::new(&tmp, size).into_drawing_area();
        chart.draw(root.clone())?;
        root.present().map_err(|e| anyhow!("chart: {e:?}"))?;
        drop(root);
        std::fs::rename(&tmp, &png)?;
        Ok(())
    })();
    // On failure (a full disk) the old chart stays and the temporary goes.
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        e.context(format!(
            "cannot write {} (the old file, if any, is unchanged)",
            png.display()
        ))
    })
}

/// Points `parent/<link>` at `target` (a sibling directory), atomically. Leaves a
/// `link` that exists and is not a symlink alone (with a warning).
pub fn update_latest(parent: &Path, link: &str, target: &Path) {
    let path = parent.join(link);
    if path.exists() && !path.is_symlink() {
        eprintln!(
            "warning: {} exists and is not a symlink; not updated",
            path.display()
        );
        return;
    }
    let Some(name) = target.file_name() else {
        return;
    };
    let tmp = parent.join(format!(".{link}.tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    if std::os::unix::fs::symlink(name, &tmp).is_ok() && std::fs::rename(&tmp, &path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// Refuses, before any work, an output path `flag PATH` that cannot be written: a
/// directory, a FIFO or socket, or a file in a directory that does not exist (a usage
/// error, exit 2). A regular file, a device or a link to either is accepted.
pub fn check_output_path(flag: &str, p: &Path) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(m) = std::fs::metadata(p) {
        let ft = m.file_type();
        if ft.is_dir() {
            return Err(crate::args::usage(format!(
                "{flag} {} is a directory: give a file path",
                p.display()
            )));
        }
        if ft.is_fifo() || ft.is_socket() {
            return Err(crate::args::usage(format!(
                "{flag} {} is a FIFO or socket: give a file path",
                p.display()
            )));
        }
        return Ok(());
    }
    let parent = p.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(d) = parent.filter(|d| !d.is_dir()) {
        return Err(crate::args::usage(format!(
            "{flag} {}: directory {} does not exist",
            p.display(),
            d.display()
        )));
    }
    Ok(())
}

/// `text` made safe for one Markdown table cell or heading line: `|` escaped as `\|`,
/// newlines and other control characters as spaces (hyperfine escapes `|` the same
/// way), so a name can neither end a cell nor start a heading of its own.
pub fn md_cell(text: &str) -> String {
    let mut o = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '|' => o.push_str("\\|"),
            c if c.is_control() => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod md_tests {
    #[test]
    fn md_cell_escapes_pipes_and_newlines() {
        assert_eq!(
            super::md_cell("a|b\n## Verdict: FAIL\r"),
            "a\\|b ## Verdict: FAIL "
        );
    }
}
