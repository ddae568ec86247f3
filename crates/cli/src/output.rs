//! How the data and admin commands print: the `--output table|json|raw` choice,
//! safe escaping of stored bytes, tables, JSON encoding of keys and values, and
//! standard output that a closed pipe ends quietly.
//!
//! Stored keys and values are arbitrary bytes. Printed for a person (`table`, the
//! default) they are escaped so that no byte can move the cursor, clear the screen
//! or split a row: see [`escape`]. `raw` prints the exact bytes (for `get`, nothing
//! else, so `ramstore get --raw T K > file` round-trips `put --value-file file`).
//! `json` prints one JSON document per command, a key or value as `"key"`/`"value"`
//! when it is UTF-8 text and as `"key_base64"`/`"value_base64"` otherwise.

use std::io::{self, Write};

use base64::Engine;
use comfy_table::{presets, CellAlignment, ContentArrangement, Table};
use serde_json::{Map, Value};

/// `--output`: how a command prints its result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For people: tables with a header, stored bytes escaped.
    #[default]
    Table,
    /// One JSON document (an object, or an array for lists).
    Json,
    /// For scripts: bare results, tab-separated rows without a header, stored
    /// bytes exactly as they are.
    Raw,
}

/// The output options every data and admin command takes.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct OutputArgs {
    /// How to print the result: `table` (for people; stored bytes escaped), `json`,
    /// or `raw` (exact bytes; rows tab-separated, no header).
    #[arg(long, short = 'o', value_enum, value_name = "FORMAT", default_value_t = Format::Table)]
    output: Format,
    /// Short for `--output json`.
    #[arg(long, conflicts_with_all = ["output", "raw"])]
    json: bool,
    /// Short for `--output raw`.
    #[arg(long, conflicts_with = "output")]
    raw: bool,
}

impl OutputArgs {
    pub fn format(&self) -> Format {
        if self.json {
            Format::Json
        } else if self.raw {
            Format::Raw
        } else {
            self.output
        }
    }
}

/// Escapes stored bytes for a terminal, like redis-cli's quoting but without the
/// quotes: printable text (UTF-8, any script) is kept; a backslash becomes `\\`;
/// newline, carriage return and tab become `\n`, `\r`, `\t`; other control
/// characters become `\xNN` (ASCII) or `\u{N}` (Unicode); bytes that are not
/// UTF-8 become `\xNN`. The result is one line without tabs, and distinct inputs
/// give distinct outputs (the escaping is reversible).
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
                c if is_unsafe_unicode(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Unicode characters a terminal would not show as themselves: C1 controls,
/// line and paragraph separators, and the bidirectional overrides and isolates
/// that reorder the text around them.
fn is_unsafe_unicode(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Puts bytes into a JSON object as `"NAME"` (UTF-8 text, exact) or
/// `"NAME_base64"` (standard alphabet, padded).
pub fn json_bytes(object: &mut Map<String, Value>, name: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => object.insert(name.to_string(), Value::String(text.to_string())),
        Err(_) => object.insert(
            format!("{name}_base64"),
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
        ),
    };
}

/// A table for people: a header row, then one row per item, columns separated by
/// spaces (no borders, so `awk` and `cut` still work on simple values), numeric
/// columns right-aligned, no trailing spaces. Cells are expected escaped.
pub struct Columns {
    table: Table,
}

impl Columns {
    /// `header`: (name, right-aligned?) per column.
    pub fn new(header: &[(&str, bool)]) -> Columns {
        let mut table = Table::new();
        table
            .load_style(presets::NOTHING)
            .set_content_arrangement(ContentArrangement::Disabled)
            .set_header(header.iter().map(|(name, _)| *name));
        for (i, (_, right)) in header.iter().enumerate() {
            if let Some(column) = table.column_mut(i) {
                column.set_padding((0, 1));
                if *right {
                    column.set_cell_alignment(CellAlignment::Right);
                }
            }
        }
        Columns { table }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.table.add_row(cells);
    }

    /// The rendered lines, trailing spaces removed.
    pub fn lines(&self) -> Vec<String> {
        self.table
            .lines()
            .map(|l| l.trim_end().to_string())
            .collect()
    }

    pub fn print(&self, out: &mut impl Write) -> io::Result<()> {
        for line in self.lines() {
            writeln!(out, "{line}")?;
        }
        Ok(())
    }
}

/// Prints one JSON document and a newline.
pub fn print_json(out: &mut impl Write, value: &Value) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)
}

/// Whether `e` (or an error it wraps) is a write to a closed pipe: the reader of
/// our standard output went away (`ramstore scan t | head`). Like coreutils, the
/// command then stops quietly instead of reporting it.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
            || cause
                .downcast_ref::<serde_json::Error>()
                .and_then(|j| j.io_error_kind())
                .is_some_and(|kind| kind == io::ErrorKind::BrokenPipe)
    })
}

/// The message for a failed command: each cause of `e` after its context, joined
/// by ": " (as anyhow's `{:#}`), leaving out a cause whose text the message already
/// ends with. Library errors often name their source in their own text too ("cannot
/// listen on ADDR: Address already in use"), which `{:#}` would print twice.
pub fn error_message(e: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if message.is_empty() {
            message = text;
        } else if !message.ends_with(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (issue 18): "cannot listen on 127.0.0.1:7300: Address already
    /// in use (os error 98): Address already in use (os error 98)".
    #[test]
    fn error_message_names_a_repeated_cause_once() {
        // As the coordinator's and server's listen errors: the source in the text.
        #[derive(Debug)]
        struct Listen {
            addr: &'static str,
            source: io::Error,
        }
        impl std::fmt::Display for Listen {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "cannot listen on {}: {}", self.addr, self.source)
            }
        }
        impl std::error::Error for Listen {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.source)
            }
        }
        let e = anyhow::Error::new(Listen {
            addr: "127.0.0.1:7300",
            source: io::Error::from(io::ErrorKind::AddrInUse),
        })
        .context("starting the coordinator on 127.0.0.1:7300");
        assert_eq!(
            error_message(&e),
            "starting the coordinator on 127.0.0.1:7300: cannot listen on 127.0.0.1:7300: \
             address in use"
        );
        // A cause not already in the message is still named.
        let e = anyhow::Error::new(io::Error::from(io::ErrorKind::NotFound)).context("opening x");
        assert_eq!(error_message(&e), "opening x: entity not found");
    }

    #[test]
    fn escape_keeps_printable_text() {
        assert_eq!(escape(b"world"), "world");
        assert_eq!(
            escape("héllo wörld ✓ 日本".as_bytes()),
            "héllo wörld ✓ 日本"
        );
        assert_eq!(escape(b""), "");
        assert_eq!(escape(b"a b\"c'"), "a b\"c'");
    }

    #[test]
    fn escape_control_and_invalid_bytes() {
        assert_eq!(escape(b"a\\b"), "a\\\\b");
        assert_eq!(escape(b"l1\nl2\r\tx"), "l1\\nl2\\r\\tx");
        assert_eq!(escape(b"\x00\x1b[2J\x7f"), "\\x00\\x1b[2J\\x7f");
        assert_eq!(escape(&[0xff, b'a', 0xc3]), "\\xffa\\xc3");
        assert_eq!(
            escape(&7i64.to_le_bytes()),
            "\\x07\\x00\\x00\\x00\\x00\\x00\\x00\\x00"
        );
        assert_eq!(escape("\u{85}x\u{202e}y".as_bytes()), "\\u{85}x\\u{202e}y");
    }

    /// Escaped text is one line without tabs, and different bytes never escape to
    /// the same text (a backslash in the data is itself escaped).
    #[test]
    fn escape_is_one_line_and_unambiguous() {
        let inputs: [&[u8]; 6] = [b"\\x00", b"\x00", b"\\n", b"\n", &[0xc3], b"\\xc3"];
        let escaped: Vec<String> = inputs.iter().map(|b| escape(b)).collect();
        for (i, a) in escaped.iter().enumerate() {
            assert!(!a.contains(['\n', '\t', '\r']), "{a:?}");
            for b in &escaped[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn json_bytes_text_or_base64() {
        let mut o = Map::new();
        json_bytes(&mut o, "key", b"k\n\"1\"");
        json_bytes(&mut o, "value", &[0, 0xff, 1]);
        assert_eq!(
            Value::Object(o),
            serde_json::json!({"key": "k\n\"1\"", "value_base64": "AP8B"})
        );
    }

    #[test]
    fn columns_align_without_borders_or_trailing_spaces() {
        let mut t = Columns::new(&[("TABLE", false), ("ID", true), ("TABLETS", true)]);
        t.row(vec!["demo".into(), "1".into(), "2".into()]);
        t.row(vec!["a longer name".into(), "12".into(), "1".into()]);
        assert_eq!(
            t.lines(),
            [
                "TABLE         ID TABLETS",
                "demo           1       2",
                "a longer name 12       1",
            ]
        );
    }

    #[test]
    fn broken_pipe_is_found_through_context() {
        let io = io::Error::from(io::ErrorKind::BrokenPipe);
        let e = anyhow::Error::from(io).context("printing");
        assert!(is_broken_pipe(&e));
        assert!(!is_broken_pipe(&anyhow::anyhow!("other")));
    }
}
