//! Pages held to what berth prints where no example on them can run
//! (kube mode against the stand-in API server, an outage, a refusal): a
//! test hands the line it saw to [`page_shows`] (exactly) or
//! [`page_shows_like`] (up to addresses, durations and counts).

use anyhow::{Context, Result, ensure};

use crate::workspace_root;

/// Fails unless `page` (from the workspace root) has a line that is
/// `line` exactly: a page quoting what berth prints where the suite has no
/// runnable example for it (kube mode, against the stand-in API server)
/// is held to what the test saw printed.
pub fn page_shows(page: &str, line: &str) -> Result<()> {
    let text = std::fs::read_to_string(workspace_root().join(page))
        .with_context(|| format!("reading {page}"))?;
    ensure!(
        text.lines().any(|l| l == line),
        "{page} does not show the line berth prints:\n{line}"
    );
    Ok(())
}

/// Fails unless `page` has a line that shows `printed` (a log line's level
/// and message, `LEVEL message`) as berth printed it in a test, up to what
/// varies from run to run and from the page's example: addresses
/// (`10.0.0.1:6443`), durations (`3m12s`, `10.4s`) and counts are compared
/// by their shape, not their value, and a `...` on the page stands for
/// text it cut (the last error, say). For lines a page quotes from an
/// outage or a refusal, which no example on the page can run.
pub fn page_shows_like(page: &str, printed: &str) -> Result<()> {
    let text = std::fs::read_to_string(workspace_root().join(page))
        .with_context(|| format!("reading {page}"))?;
    let printed = shape(printed);
    ensure!(
        text.lines().any(|l| shape_matches(&shape(l), &printed)),
        "{page} shows no line like the one berth printed (addresses, durations and numbers aside; `...` cuts):\n{printed}"
    );
    Ok(())
}

/// `line` with its addresses as `ADDR`, its Go durations as `D` and its
/// other numbers as `N`.
fn shape(line: &str) -> String {
    let b = line.as_bytes();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    let digits = |mut j: usize| {
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        j
    };
    while i < b.len() {
        // A number begins a word unless it follows a letter, a digit or `_`,
        // or a dot that does (`v1.36` stays).
        let inside = |j: usize| b[j].is_ascii_alphanumeric() || b[j] == b'_';
        let starts_word =
            i == 0 || !(inside(i - 1) || (b[i - 1] == b'.' && i >= 2 && inside(i - 2)));
        if !(b[i].is_ascii_digit() && starts_word) {
            let c = line[i..].chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
            continue;
        }
        // An IPv4 address with its port: four numbers, dotted, then `:N`.
        let mut j = digits(i);
        let mut dots = 0;
        while dots < 3 && j + 1 < b.len() && b[j] == b'.' && b[j + 1].is_ascii_digit() {
            j = digits(j + 1);
            dots += 1;
        }
        if dots == 3 && j + 1 < b.len() && b[j] == b':' && b[j + 1].is_ascii_digit() {
            out.push_str("ADDR");
            i = digits(j + 1);
            continue;
        }
        // A Go duration: numbers, each with a unit (`1h2m3.5s`, `250ms`).
        let mut j = i;
        let mut units = 0;
        loop {
            let mut k = digits(j);
            if k == j {
                break;
            }
            if k + 1 < b.len() && b[k] == b'.' && b[k + 1].is_ascii_digit() {
                k = digits(k + 1);
            }
            let unit = ["ns", "µs", "us", "ms", "h", "m", "s"]
                .into_iter()
                .find(|u| line[k..].starts_with(u));
            let Some(u) = unit else { break };
            let end = k + u.len();
            // A unit ends the word (`5s`, not `5seconds`).
            if end < b.len() && b[end].is_ascii_alphabetic() {
                break;
            }
            j = end;
            units += 1;
        }
        if units > 0 {
            out.push('D');
            i = j;
            continue;
        }
        out.push('N');
        i = digits(i);
        // A decimal's fraction is part of the number.
        if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
            i = digits(i + 1);
        }
    }
    out
}

/// Whether a page's `shown` line (shaped) matches `printed` (shaped):
/// equal, but where the page has `...`, which matches any text.
fn shape_matches(shown: &str, printed: &str) -> bool {
    let pieces: Vec<&str> = shown.split("...").collect();
    let (first, rest) = pieces.split_first().expect("split yields one piece");
    let Some(mut left) = printed.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return left.is_empty();
    };
    for piece in middle {
        match left.find(piece) {
            Some(at) => left = &left[at + piece.len()..],
            None => return false,
        }
    }
    left.ends_with(last)
}

#[cfg(test)]
mod shape_tests {
    use super::{shape, shape_matches};

    #[test]
    fn addresses_durations_and_numbers_are_compared_by_shape() {
        assert_eq!(
            shape(
                "WARN the API server 10.0.0.1:6443 still down after 3m12s: 182 attempts in the last 1m0s, 10.4s, 250ms, 0.5"
            ),
            "WARN the API server ADDR still down after D: N attempts in the last D, D, D, N"
        );
        // Numbers that begin a word are counts; inside a word they stay.
        assert_eq!(
            shape("web-7 v1.36 k8s error 111"),
            "web-N v1.36 k8s error N"
        );
    }

    #[test]
    fn a_cut_matches_any_text() {
        let printed = "INFO it is back: N attempts; the last error: boom";
        assert!(shape_matches(printed, printed));
        assert!(shape_matches("INFO it is back: ...", printed));
        assert!(shape_matches(
            "INFO it is back: ...; the last error: ...",
            printed
        ));
        assert!(shape_matches("INFO ... error: boom", printed));
        assert!(!shape_matches("INFO it is back", printed));
        assert!(!shape_matches("INFO it is down: ...", printed));
        assert!(!shape_matches("... error: bang", printed));
    }
}
