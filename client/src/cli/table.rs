//! Plain-text tables: columns padded to their widest cell, separated by
//! three spaces, the last column never padded (it often holds a long reason).

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text columns.
    Left,
    /// Numbers.
    Right,
}

/// A table being built.
#[derive(Debug, Clone)]
pub struct Table {
    headers: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers, every column left-aligned.
    pub fn new<S: Into<String>>(headers: impl IntoIterator<Item = S>) -> Self {
        let headers: Vec<String> = headers.into_iter().map(Into::into).collect();
        Self {
            align: vec![Align::Left; headers.len()],
            headers,
            rows: Vec::new(),
        }
    }

    /// Right-aligns column `i`.
    pub fn right(mut self, i: usize) -> Self {
        if let Some(a) = self.align.get_mut(i) {
            *a = Align::Right;
        }
        self
    }

    /// Adds a row (missing cells are blank, extra ones dropped).
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let mut cells: Vec<String> = cells.into_iter().map(Into::into).collect();
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    /// The rows added so far.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no row has been added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text, one line per row, each ending in a newline.
    pub fn render(&self) -> String {
        let width = |s: &str| s.chars().count();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| width(h)).collect();
        for r in &self.rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(width(c));
            }
        }
        let mut out = String::new();
        for cells in std::iter::once(&self.headers).chain(&self.rows) {
            let mut line = String::new();
            let last = cells.len().saturating_sub(1);
            for (i, c) in cells.iter().enumerate() {
                let pad = widths[i].saturating_sub(width(c));
                if self.align[i] == Align::Right {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(c);
                } else {
                    line.push_str(c);
                    if i != last {
                        line.push_str(&" ".repeat(pad));
                    }
                }
                if i != last {
                    line.push_str("   ");
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_pad_to_the_widest_cell_and_numbers_align_right() {
        let mut t = Table::new(["NAME", "N", "REASON"]).right(1);
        t.row(["a", "7", "short"]);
        t.row(["longer", "123", ""]);
        assert_eq!(
            t.render(),
            "NAME       N   REASON\na          7   short\nlonger   123\n"
        );
        assert_eq!(t.len(), 2);
    }
}
