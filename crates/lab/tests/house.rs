//! The house's checks: rules about the source tree itself, checked on every `cargo test`, with no
//! servers, no root and nothing but the standard library.
//!
//! - No import circle between the module files of any crate ([`circles`]): a newcomer reads a crate
//!   from its leaves up, and a circle has no leaves.
//! - ARCHITECTURE.md's crate map matches the Cargo manifests and the crates' top-level modules
//!   ([`map`]), and the document stays a front door: under its size budget, one line per decision,
//!   every relative link pointing at a file that exists ([`front_door`]).
//!
//! The scanner is a careful token scan, not a parser: comments, strings and character literals are
//! blanked, then paths, `use` trees, `mod` declarations and `#[cfg(test)]` items are recognised on
//! the tokens that remain. Its rules are unit-tested on small inline trees at the end of this file.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

/// The workspace's root: this crate lives at `crates/lab`.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the workspace root")
}

/// The workspace's crates: every directory under `crates/` with a manifest, by directory name.
fn crate_dirs(ws: &Path) -> Vec<(String, PathBuf)> {
    let mut dirs: Vec<(String, PathBuf)> = fs::read_dir(ws.join("crates"))
        .expect("read crates/")
        .map(|e| e.expect("a crates/ entry").path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), p))
        .collect();
    dirs.sort();
    dirs
}

/// Every crate root of the workspace and of `fuzz/`: `src/lib.rs`, `src/main.rs`, `src/bin/*.rs` and
/// each fuzz target, each one a module tree of its own.
fn crate_roots(ws: &Path) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    for (_, dir) in crate_dirs(ws) {
        let src = dir.join("src");
        roots.extend(["lib.rs", "main.rs"].iter().map(|f| src.join(f)).filter(|p| p.is_file()));
        roots.extend(rs_files(&src.join("bin")));
    }
    roots.extend(rs_files(&ws.join("fuzz/fuzz_targets")));
    roots
}

fn rs_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = match fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.expect("a directory entry").path()).filter(|p| p.extension().is_some_and(|x| x == "rs")).collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    files
}

#[test]
fn no_import_circle_in_any_crate() {
    let ws = workspace();
    let mut report = String::new();
    for root in crate_roots(&ws) {
        let tree = circles::Tree::load(&root, &|p: &Path| fs::read_to_string(p).ok()).unwrap_or_else(|e| panic!("{e}"));
        for circle in tree.circles() {
            report += &circle.describe(&ws);
        }
    }
    assert!(report.is_empty(), "import circles between module files (the rule: see crates/lab/tests/house.rs, mod circles):\n{report}");
}

#[test]
fn crate_map_matches_the_manifests() {
    check_architecture(map::check, "ARCHITECTURE.md's crate map disagrees with the tree (the rule: see crates/lab/tests/house.rs, mod map)");
}

#[test]
fn architecture_is_a_front_door() {
    check_architecture(front_door::check, "ARCHITECTURE.md (the rule: see crates/lab/tests/house.rs, mod front_door)");
}

/// Runs one check of ARCHITECTURE.md and fails with every problem it found.
fn check_architecture(check: fn(&Path, &str) -> Vec<String>, what: &str) {
    let ws = workspace();
    let doc = fs::read_to_string(ws.join("ARCHITECTURE.md")).expect("read ARCHITECTURE.md");
    let problems = check(&ws, &doc);
    assert!(problems.is_empty(), "{what}:\n{}", problems.join("\n"));
}

/// Source text as tokens: identifiers, `::`, and single punctuation characters, each with its line.
/// Comments, string, byte, raw and character literals and numbers are dropped, so that nothing in
/// prose or data is taken for a path, except the paths of doc comments' intra-doc links.
mod lex {
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum Tok {
        Ident(String),
        /// `::`
        Sep,
        Punct(char),
        /// A `crate::`/`super::` path in an intra-doc link of a doc comment (`[`crate::a::B`]`,
        /// `[text](super::c)`): rustdoc resolves it, so it is a name the module uses.
        DocPath(Vec<String>),
    }

    #[derive(Clone, Debug)]
    pub struct Token {
        pub tok: Tok,
        pub line: usize,
    }

    pub fn lex(src: &str) -> Vec<Token> {
        let c: Vec<char> = src.chars().collect();
        let at = |i: usize| c.get(i).copied().unwrap_or('\0');
        let (mut i, mut line, mut out) = (0, 1, Vec::new());
        while i < c.len() {
            let start = i;
            let ch = c[i];
            if ch == '/' && at(i + 1) == '/' {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
                doc_paths(&c[start..i], line, &mut out);
            } else if ch == '/' && at(i + 1) == '*' {
                i = block_comment_end(&c, i);
                doc_paths(&c[start..i], line, &mut out);
            } else if let Some(end) = literal_end(&c, i) {
                i = end;
            } else if ch == '\'' {
                i = quote_end(&c, i);
            } else if ch.is_alphabetic() || ch == '_' {
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
                // A raw identifier (`r#type`) is the identifier.
                if i - start == 1 && ch == 'r' && at(i) == '#' && (at(i + 1).is_alphabetic() || at(i + 1) == '_') {
                    let s = i + 1;
                    i = s;
                    while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                        i += 1;
                    }
                    out.push(Token { tok: Tok::Ident(c[s..i].iter().collect()), line });
                } else {
                    out.push(Token { tok: Tok::Ident(c[start..i].iter().collect()), line });
                }
            } else if ch.is_ascii_digit() {
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            } else if ch == ':' && at(i + 1) == ':' {
                out.push(Token { tok: Tok::Sep, line });
                i += 2;
            } else {
                if !ch.is_whitespace() {
                    out.push(Token { tok: Tok::Punct(ch), line });
                }
                i += 1;
            }
            i = i.min(c.len());
            line += c[start..i].iter().filter(|&&x| x == '\n').count();
        }
        out
    }

    /// The intra-doc link paths of a comment, if it is a doc comment (`///`, `//!`, `/**`, `/*!`).
    fn doc_paths(comment: &[char], mut line: usize, out: &mut Vec<Token>) {
        let text: String = comment.iter().collect();
        let doc =
            (text.starts_with("///") && !text.starts_with("////")) || text.starts_with("//!") || (text.starts_with("/**") && !text.starts_with("/***") && text != "/**/") || text.starts_with("/*!");
        if !doc {
            return;
        }
        for piece in text.split('\n') {
            for anchor in ["crate::", "super::"] {
                for (k, _) in piece.match_indices(anchor) {
                    let before = &piece[..k];
                    if !(before.ends_with('[') || before.ends_with("[`") || before.ends_with("](")) {
                        continue;
                    }
                    let path: String = piece[k..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
                    let segs: Vec<String> = path.split("::").filter(|s| !s.is_empty()).map(str::to_string).collect();
                    out.push(Token { tok: Tok::DocPath(segs), line });
                }
            }
            line += 1;
        }
    }

    /// The end of a (nested) block comment starting at `i`.
    fn block_comment_end(c: &[char], mut i: usize) -> usize {
        let mut depth = 0;
        while i < c.len() {
            if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                depth += 1;
                i += 2;
            } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            } else {
                i += 1;
            }
        }
        i
    }

    /// The end of a string literal (`"…"`, `b"…"`, `c"…"`, `r#"…"#`, `br"…"`) or byte literal
    /// (`b'…'`) starting at `i`; `None` if none starts there.
    fn literal_end(c: &[char], i: usize) -> Option<usize> {
        let at = |k: usize| c.get(k).copied().unwrap_or('\0');
        let mut k = i;
        if matches!(at(k), 'b' | 'c') {
            k += 1;
        }
        if at(k) == '\'' && k == i + 1 && at(i) == 'b' {
            return Some(quote_end(c, k));
        }
        if at(k) == 'r' && (at(k + 1) == '"' || at(k + 1) == '#') {
            let mut hashes = 0;
            k += 1;
            while at(k) == '#' {
                hashes += 1;
                k += 1;
            }
            if at(k) != '"' {
                return None;
            }
            k += 1;
            while k < c.len() {
                if c[k] == '"' && (1..=hashes).all(|h| at(k + h) == '#') {
                    return Some(k + 1 + hashes);
                }
                k += 1;
            }
            return Some(k);
        }
        if at(k) != '"' {
            return None;
        }
        k += 1;
        while k < c.len() && c[k] != '"' {
            k += if c[k] == '\\' { 2 } else { 1 };
        }
        Some(k + 1)
    }

    /// After a `'`: a character literal's end, or just past the quote of a lifetime or label.
    fn quote_end(c: &[char], i: usize) -> usize {
        if c.get(i + 1) == Some(&'\\') {
            let mut k = i + 3;
            while k < c.len() && c[k] != '\'' {
                k += 1;
            }
            k + 1
        } else if c.get(i + 2) == Some(&'\'') {
            i + 3
        } else {
            i + 1
        }
    }
}

/// What one file says about modules: the files it declares (`mod x;`), its inline modules, the
/// items it defines, the `crate::`/`super::` paths it names, and its `use` re-exports.
mod scan {
    use super::lex::{lex, Tok, Token};

    /// How a path starts.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum Anchor {
        /// `crate::` (or `$crate::` in a macro)
        Crate,
        /// `super::`, repeated n times
        Super(usize),
        /// `self::`
        SelfMod,
        /// a bare name: a child module, or another crate
        Bare,
    }

    /// A path named in code, inside the inline module `at` of its file (empty: the file's module).
    #[derive(Clone, Debug)]
    pub struct Named {
        pub at: Vec<String>,
        pub anchor: Anchor,
        pub segs: Vec<String>,
        pub line: usize,
    }

    /// A `pub use` (any `pub(…)` too): `name` in module `at` is `target`.
    #[derive(Clone, Debug)]
    pub struct Reexport {
        pub at: Vec<String>,
        /// The name it is known by here; `None` for a glob (`pub use x::*`).
        pub name: Option<String>,
        pub target: Named,
    }

    #[derive(Debug, Default)]
    pub struct FileScan {
        /// `mod x;`: the inline module it sits in, its name, its line.
        pub mods: Vec<(Vec<String>, String, usize)>,
        /// Inline modules outside tests, as paths within the file.
        pub inline: Vec<Vec<String>>,
        /// Names of items defined at module level, with the inline module they are in.
        pub defines: Vec<(Vec<String>, String)>,
        /// Every path naming `crate::`, `super::` or `self::`, in code and `use` trees.
        pub named: Vec<Named>,
        pub reexports: Vec<Reexport>,
    }

    const ITEM_KEYWORDS: [&str; 14] = ["fn", "impl", "struct", "enum", "union", "trait", "mod", "use", "const", "static", "type", "extern", "macro_rules", "unsafe"];
    const DEFINING: [&str; 8] = ["fn", "struct", "enum", "union", "trait", "const", "static", "type"];

    pub fn scan(src: &str) -> FileScan {
        Scanner { t: lex(src), out: FileScan::default(), frames: Vec::new() }.run()
    }

    struct Scanner {
        t: Vec<Token>,
        out: FileScan,
        /// One per open `{`: the inline module's name, or `None` for any other block.
        frames: Vec<Option<String>>,
    }

    impl Scanner {
        fn ident(&self, i: usize) -> Option<&str> {
            match self.t.get(i).map(|t| &t.tok) {
                Some(Tok::Ident(s)) => Some(s),
                _ => None,
            }
        }

        fn is(&self, i: usize, p: char) -> bool {
            matches!(self.t.get(i).map(|t| &t.tok), Some(Tok::Punct(c)) if *c == p)
        }

        fn is_sep(&self, i: usize) -> bool {
            matches!(self.t.get(i).map(|t| &t.tok), Some(Tok::Sep))
        }

        /// The inline module the scan is in (`None` inside a function or other block).
        fn module(&self) -> Option<Vec<String>> {
            self.frames.iter().cloned().collect()
        }

        /// The inline module path around the scan, ignoring blocks (for paths named in a body).
        fn at(&self) -> Vec<String> {
            self.frames.iter().flatten().cloned().collect()
        }

        fn run(mut self) -> FileScan {
            let mut i = 0;
            while i < self.t.len() {
                i = self.step(i);
            }
            self.out
        }

        fn step(&mut self, i: usize) -> usize {
            if self.is(i, '#') {
                let (end, test) = self.attributes(i);
                return if test { self.skip_item(end) } else { end };
            }
            if let Tok::DocPath(segs) = &self.t[i].tok {
                if let Some(named) = named(self.at(), segs.clone(), self.t[i].line) {
                    self.out.named.push(named);
                }
                return i + 1;
            }
            if self.is(i, '{') {
                self.frames.push(None);
                return i + 1;
            }
            if self.is(i, '}') {
                self.frames.pop();
                return i + 1;
            }
            match self.ident(i) {
                Some("mod") => self.module_item(i),
                Some("use") => self.use_item(i),
                Some("crate" | "super" | "self") if self.is_sep(i + 1) && !self.is_sep(i.wrapping_sub(1)) => self.path(i),
                Some(k) if DEFINING.contains(&k) => {
                    if let (Some(at), Some(name)) = (self.module(), self.ident(i + 1)) {
                        self.out.defines.push((at, name.to_string()));
                    }
                    i + 1
                }
                _ => i + 1,
            }
        }

        /// Attributes from `i` (outer or inner); their end, and whether one is `#[cfg(test)]`.
        fn attributes(&self, mut i: usize) -> (usize, bool) {
            let mut test = false;
            while self.is(i, '#') {
                let inner = self.is(i + 1, '!');
                let open = if inner { i + 2 } else { i + 1 };
                if !self.is(open, '[') {
                    return (i + 1, test);
                }
                let close = self.matching(open);
                let body: Vec<&Tok> = self.t[open + 1..close].iter().map(|t| &t.tok).collect();
                let cfg_test = [Tok::Ident("cfg".into()), Tok::Punct('('), Tok::Ident("test".into()), Tok::Punct(')')];
                test |= !inner && body.len() == 4 && body.iter().zip(cfg_test.iter()).all(|(a, b)| *a == b);
                i = close + 1;
            }
            (i, test)
        }

        /// The index of the delimiter closing the one at `open`.
        fn matching(&self, open: usize) -> usize {
            let mut depth = 0i32;
            for k in open..self.t.len() {
                match self.t[k].tok {
                    Tok::Punct('(' | '[' | '{') => depth += 1,
                    Tok::Punct(')' | ']' | '}') => {
                        depth -= 1;
                        if depth == 0 {
                            return k;
                        }
                    }
                    _ => {}
                }
            }
            self.t.len() - 1
        }

        /// Past the item (or field, statement, arm) starting at `i`: an item ends at its `;` or its
        /// closing brace, anything else also at a `,`, and nothing reaches past its enclosing block.
        fn skip_item(&self, i: usize) -> usize {
            let mut k = i;
            while matches!(self.t.get(k).map(|t| &t.tok), Some(Tok::DocPath(_))) {
                k += 1;
            }
            while self.ident(k).is_some_and(|s| s == "pub") {
                k += if self.is(k + 1, '(') { self.matching(k + 1) - k + 1 } else { 1 };
            }
            let item = self.ident(k).is_some_and(|s| ITEM_KEYWORDS.contains(&s));
            let mut depth = 0i32;
            while k < self.t.len() {
                match self.t[k].tok {
                    Tok::Punct('(' | '[' | '{') => depth += 1,
                    Tok::Punct(c @ (')' | ']' | '}')) => {
                        depth -= 1;
                        if depth < 0 {
                            return k;
                        }
                        if depth == 0 && c == '}' {
                            return k + 1;
                        }
                    }
                    Tok::Punct(';') if depth == 0 => return k + 1,
                    Tok::Punct(',') if depth == 0 && !item => return k + 1,
                    _ => {}
                }
                k += 1;
            }
            k
        }

        /// `mod x;` (a file) or `mod x {` (inline).
        fn module_item(&mut self, i: usize) -> usize {
            let Some(name) = self.ident(i + 1).map(str::to_string) else { return i + 1 };
            let line = self.t[i].line;
            if self.is(i + 2, ';') {
                if let Some(at) = self.module() {
                    self.out.mods.push((at, name, line));
                }
                return i + 3;
            }
            if self.is(i + 2, '{') {
                self.frames.push(Some(name));
                if let Some(at) = self.module() {
                    self.out.inline.push(at);
                }
                return i + 3;
            }
            i + 1
        }

        /// A path in code from `i`: `crate::a::B`, `super::super::x`, `self::y`.
        fn path(&mut self, i: usize) -> usize {
            let mut segs = Vec::new();
            let mut k = i;
            while let Some(s) = self.ident(k) {
                segs.push(s.to_string());
                if !self.is_sep(k + 1) {
                    k += 1;
                    break;
                }
                k += 2;
            }
            let line = self.t[i].line;
            if let Some(named) = named(self.at(), segs, line) {
                self.out.named.push(named);
            }
            k
        }

        /// `use …;`, split into one path per leaf; a `pub use` also recorded as a re-export.
        fn use_item(&mut self, i: usize) -> usize {
            let public = self.ident(i.wrapping_sub(1)) == Some("pub") || (self.is(i.wrapping_sub(1), ')') && self.pub_paren_before(i - 1));
            let line = self.t[i].line;
            let mut leaves = Vec::new();
            let end = self.use_tree(i + 1, Vec::new(), &mut leaves);
            let at = self.at();
            for (segs, rename, glob) in leaves {
                let Some(target) = named(at.clone(), segs, line) else { continue };
                if public && self.module().is_some() {
                    let name = if glob { None } else { rename.or_else(|| target.segs.last().cloned()) };
                    self.out.reexports.push(Reexport { at: at.clone(), name, target: target.clone() });
                }
                self.out.named.push(target);
            }
            end
        }

        /// Whether the `)` at `close` ends a `pub(…)`.
        fn pub_paren_before(&self, close: usize) -> bool {
            (0..close).rev().find(|&k| self.is(k, '(')).is_some_and(|open| self.ident(open.wrapping_sub(1)) == Some("pub"))
        }

        /// One use tree from `i` under `prefix`: its leaves as (path, rename, glob); returns its end.
        fn use_tree(&self, mut i: usize, prefix: Vec<String>, leaves: &mut Vec<(Vec<String>, Option<String>, bool)>) -> usize {
            let mut path = prefix;
            let mut glob = false;
            loop {
                if self.is_sep(i) || self.is(i, '$') {
                    i += 1;
                } else if let Some(s) = self.ident(i) {
                    path.push(s.to_string());
                    i += 1;
                    if !self.is_sep(i) {
                        break;
                    }
                } else if self.is(i, '*') {
                    glob = true;
                    i += 1;
                    break;
                } else if self.is(i, '{') {
                    i += 1;
                    while i < self.t.len() && !self.is(i, '}') {
                        i = self.use_tree(i, path.clone(), leaves);
                        if self.is(i, ',') {
                            i += 1;
                        }
                    }
                    return i + 1;
                } else {
                    break;
                }
            }
            let mut rename = None;
            if self.ident(i) == Some("as") {
                rename = self.ident(i + 1).map(str::to_string);
                i += 2;
            }
            if path.last().is_some_and(|s| s == "self") && path.len() > 1 {
                path.pop();
            }
            leaves.push((path, rename, glob));
            while i < self.t.len() && !self.is(i, ';') && !self.is(i, ',') && !self.is(i, '}') {
                i += 1;
            }
            if self.is(i, ';') {
                i + 1
            } else {
                i
            }
        }
    }

    /// A path's anchor and the segments after it.
    fn named(at: Vec<String>, mut segs: Vec<String>, line: usize) -> Option<Named> {
        let anchor = match segs.first()?.as_str() {
            "crate" => Anchor::Crate,
            "self" => Anchor::SelfMod,
            "super" => Anchor::Super(segs.iter().take_while(|s| *s == "super").count()),
            _ => Anchor::Bare,
        };
        let drop = match anchor {
            Anchor::Crate | Anchor::SelfMod => 1,
            Anchor::Super(n) => n,
            Anchor::Bare => 0,
        };
        segs.drain(..drop);
        Some(Named { at, anchor, segs, line })
    }
}

/// Import circles between the module files of one crate.
///
/// The rule: a node is a module file. A file A has an edge to a file B when A (outside
/// `#[cfg(test)]` items, plain comments and strings) names a path starting `crate::` (or `$crate::`)
/// or `super::`, in an expression, a type, a `use` tree (`use crate::{a, b::C}` names `crate::a` and
/// `crate::b::C`) or an intra-doc link (`[`crate::a`]`: rustdoc resolves it), that resolves to a
/// module of B: the longest prefix of the path that is a module
/// (an inline module counts as its file). Where that prefix is a facade (lib.rs, main.rs, mod.rs) and
/// the next segment is one of the facade's `pub use` re-exports (or an item a `pub use x::*` brings),
/// the re-export is followed to the module that defines the name. A child naming its parent counts;
/// `self::` and bare paths (a module naming its own children) do not: that is the `mod` tree's own
/// direction, and a facade's re-exports are followed instead. Any circle fails.
pub mod circles {
    use super::scan::{scan, Anchor, FileScan, Named};
    use super::*;

    pub struct Tree {
        /// The files, by index: path, scan and text.
        files: Vec<(PathBuf, FileScan, String)>,
        /// Every module (inline ones included) by its path from the root, and its file.
        modules: BTreeMap<Vec<String>, usize>,
        /// Each file's module path.
        paths: Vec<Vec<String>>,
    }

    /// One circle: the files in order, and every edge inside it with where it is named.
    pub struct Circle {
        pub files: Vec<PathBuf>,
        /// (from, to, line, the line's text) for the edges along the circle.
        pub along: Vec<(PathBuf, PathBuf, usize, String)>,
        /// Every other edge between the circle's files.
        pub others: Vec<(PathBuf, PathBuf, usize, String)>,
    }

    impl Circle {
        pub fn describe(&self, ws: &Path) -> String {
            let rel = |p: &Path| p.strip_prefix(ws).unwrap_or(p).display().to_string();
            let names: Vec<String> = self.files.iter().chain(self.files.first()).map(|p| rel(p)).collect();
            let mut s = format!("circle: {}\n", names.join(" -> "));
            for (from, to, line, text) in &self.along {
                s += &format!("  {}:{line} names {}: {text}\n", rel(from), rel(to));
            }
            if !self.others.is_empty() {
                s += "  other edges between these files:\n";
                for (from, to, line, text) in &self.others {
                    s += &format!("    {}:{line} names {}: {text}\n", rel(from), rel(to));
                }
            }
            s
        }
    }

    impl Tree {
        /// The module tree under a crate root, following `mod x;` declarations to their files.
        pub fn load(root: &Path, read: &dyn Fn(&Path) -> Option<String>) -> Result<Tree, String> {
            let mut tree = Tree { files: Vec::new(), modules: BTreeMap::new(), paths: Vec::new() };
            let mut queue = VecDeque::from([(root.to_path_buf(), Vec::new())]);
            while let Some((file, path)) = queue.pop_front() {
                let src = read(&file).ok_or_else(|| format!("cannot read {}", file.display()))?;
                let s = scan(&src);
                let index = tree.files.len();
                tree.modules.insert(path.clone(), index);
                for inline in &s.inline {
                    tree.modules.insert([path.clone(), inline.clone()].concat(), index);
                }
                let dir = module_dir(&file, root);
                for (at, name, line) in &s.mods {
                    let base = at.iter().fold(dir.clone(), |d, m| d.join(m));
                    let child = [base.join(format!("{name}.rs")), base.join(name).join("mod.rs")]
                        .into_iter()
                        .find(|p| read(p).is_some())
                        .ok_or_else(|| format!("{}:{line}: `mod {name};` has no file {name}.rs or {name}/mod.rs in {}", file.display(), base.display()))?;
                    queue.push_back((child, [path.clone(), at.clone(), vec![name.clone()]].concat()));
                }
                tree.paths.push(path);
                tree.files.push((file, s, src));
            }
            Ok(tree)
        }

        /// The file a path names, after re-exports; `None` when it names another crate.
        fn resolve(&self, segs: &[String], hops: usize) -> Option<usize> {
            if hops > 16 {
                return None;
            }
            for k in (0..=segs.len()).rev() {
                let Some(&file) = self.modules.get(&segs[..k]) else { continue };
                if k < segs.len() && is_facade(&self.files[file].0) {
                    if let Some(target) = self.reexport(file, &segs[..k], &segs[k]) {
                        let full = [target?, segs[k + 1..].to_vec()].concat();
                        return self.resolve(&full, hops + 1);
                    }
                }
                return Some(file);
            }
            None
        }

        /// Where `name`, re-exported by the facade module `module`, comes from: `Some(None)` when
        /// from another crate, `None` when it is no re-export.
        fn reexport(&self, file: usize, module: &[String], name: &str) -> Option<Option<Vec<String>>> {
            let inner = &module[self.paths[file].len()..];
            let scan = &self.files[file].1;
            let found = scan.reexports.iter().filter(|r| r.at == inner).find(|r| r.name.as_deref() == Some(name));
            if let Some(r) = found {
                return Some(self.absolute(file, &r.target));
            }
            // A glob re-export brings the names its module defines.
            for r in scan.reexports.iter().filter(|r| r.at == inner && r.name.is_none()) {
                let Some(source) = self.absolute(file, &r.target) else { continue };
                let Some(&src_file) = self.modules.get(&source) else { continue };
                let inner_src = source[self.paths[src_file].len()..].to_vec();
                if self.files[src_file].1.defines.iter().any(|(at, n)| *at == inner_src && n == name) {
                    return Some(Some([source, vec![name.to_string()]].concat()));
                }
            }
            None
        }

        /// A named path as a path from the crate root; `None` for another crate's.
        fn absolute(&self, file: usize, n: &Named) -> Option<Vec<String>> {
            let here = [self.paths[file].clone(), n.at.clone()].concat();
            let base = match n.anchor {
                Anchor::Crate => Vec::new(),
                Anchor::SelfMod => here,
                Anchor::Super(k) => here[..here.len().checked_sub(k)?].to_vec(),
                Anchor::Bare => {
                    let child = [here.clone(), vec![n.segs.first()?.clone()]].concat();
                    if !self.modules.contains_key(&child) {
                        return None;
                    }
                    here
                }
            };
            Some([base, n.segs.clone()].concat())
        }

        /// The edges: (from, to) with the first line naming it.
        fn edges(&self) -> BTreeMap<(usize, usize), usize> {
            let mut edges = BTreeMap::new();
            for (from, (_, s, _)) in self.files.iter().enumerate() {
                for n in s.named.iter().filter(|n| matches!(n.anchor, Anchor::Crate | Anchor::Super(_))) {
                    let Some(to) = self.absolute(from, n).and_then(|p| self.resolve(&p, 0)) else { continue };
                    if to != from {
                        edges.entry((from, to)).or_insert(n.line);
                    }
                }
            }
            edges
        }

        pub fn circles(&self) -> Vec<Circle> {
            let edges = self.edges();
            let mut out = Vec::new();
            for comp in components(self.files.len(), &edges).into_iter().filter(|c| c.len() > 1) {
                let cycle = shortest_cycle(comp[0], &comp, &edges);
                let edge = |&(a, b): &(usize, usize)| {
                    let line = edges[&(a, b)];
                    let text = self.files[a].2.lines().nth(line - 1).unwrap_or_default().trim().to_string();
                    (self.files[a].0.clone(), self.files[b].0.clone(), line, text)
                };
                let pairs: Vec<(usize, usize)> = (0..cycle.len()).map(|k| (cycle[k], cycle[(k + 1) % cycle.len()])).collect();
                let others = edges.keys().filter(|(a, b)| comp.contains(a) && comp.contains(b) && !pairs.contains(&(*a, *b))).map(edge).collect();
                out.push(Circle { files: cycle.iter().map(|&f| self.files[f].0.clone()).collect(), along: pairs.iter().map(edge).collect(), others });
            }
            out
        }
    }

    fn is_facade(file: &Path) -> bool {
        matches!(file.file_name().and_then(|n| n.to_str()), Some("lib.rs" | "main.rs" | "mod.rs"))
    }

    /// The directory a file's `mod x;` children live in.
    fn module_dir(file: &Path, root: &Path) -> PathBuf {
        let parent = file.parent().unwrap_or(Path::new("")).to_path_buf();
        if file == root || file.file_name().is_some_and(|n| n == "mod.rs") {
            parent
        } else {
            parent.join(file.file_stem().unwrap())
        }
    }

    /// Strongly connected components (Tarjan), each sorted.
    fn components(n: usize, edges: &BTreeMap<(usize, usize), usize>) -> Vec<Vec<usize>> {
        struct T<'a> {
            adj: Vec<Vec<usize>>,
            index: Vec<Option<usize>>,
            low: Vec<usize>,
            stack: Vec<usize>,
            on: Vec<bool>,
            next: usize,
            out: &'a mut Vec<Vec<usize>>,
        }
        fn visit(t: &mut T, v: usize) {
            t.index[v] = Some(t.next);
            t.low[v] = t.next;
            t.next += 1;
            t.stack.push(v);
            t.on[v] = true;
            for w in t.adj[v].clone() {
                match t.index[w] {
                    None => {
                        visit(t, w);
                        t.low[v] = t.low[v].min(t.low[w]);
                    }
                    Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                    _ => {}
                }
            }
            if Some(t.low[v]) == t.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = t.stack.pop() {
                    t.on[w] = false;
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                comp.sort();
                t.out.push(comp);
            }
        }
        let mut adj = vec![Vec::new(); n];
        for &(a, b) in edges.keys() {
            adj[a].push(b);
        }
        let mut out = Vec::new();
        let mut t = T { adj, index: vec![None; n], low: vec![0; n], stack: Vec::new(), on: vec![false; n], next: 0, out: &mut out };
        for v in 0..n {
            if t.index[v].is_none() {
                visit(&mut t, v);
            }
        }
        out.sort();
        out
    }

    /// A shortest cycle through `start` within `comp` (breadth first).
    fn shortest_cycle(start: usize, comp: &[usize], edges: &BTreeMap<(usize, usize), usize>) -> Vec<usize> {
        let mut prev: BTreeMap<usize, usize> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(v) = queue.pop_front() {
            for &(_, w) in edges.range((v, 0)..=(v, usize::MAX)).map(|(k, _)| k) {
                if !comp.contains(&w) {
                    continue;
                }
                if w == start {
                    let mut cycle = vec![v];
                    while let Some(&p) = prev.get(cycle.last().unwrap()) {
                        cycle.push(p);
                    }
                    cycle.reverse();
                    return cycle;
                }
                if w != start && !prev.contains_key(&w) {
                    prev.insert(w, v);
                    queue.push_back(w);
                }
            }
        }
        vec![start]
    }
}

/// ARCHITECTURE.md's crate map against the tree.
///
/// The rule: the table under "## The crates" has one row per workspace crate (the first name in
/// backticks in its first column is the crate's directory under `crates/`) and one for `fuzz/`.
/// - "depends on" lists exactly the crate's workspace-internal dependencies from its Cargo.toml:
///   `[dependencies]` and `[target.….dependencies]`, optional ones (behind a feature) included and
///   marked `(optional)`; dev- and build-dependencies left out; `–` when there are none.
/// - "what it is" names every top-level module (a `mod x` in src/lib.rs or src/main.rs, outside
///   `#[cfg(test)]`) in backticks, as `` `x` `` or `` `x/` ``; for `fuzz/`, every fuzz target.
pub mod map {
    use super::*;

    /// One row: the crate, what it is, its dependencies (name -> marked optional).
    pub struct Row {
        pub name: String,
        pub what: String,
        pub deps: BTreeMap<String, bool>,
    }

    pub fn rows(doc: &str) -> Vec<Row> {
        let section = doc.split("\n## ").find(|s| s.starts_with("The crates")).unwrap_or("");
        section
            .lines()
            .filter(|l| l.starts_with('|') && !l.starts_with("|---") && !l.starts_with("| crate "))
            .filter_map(|l| {
                let cells: Vec<&str> = l.trim().trim_matches('|').split('|').map(str::trim).collect();
                let name = cells.first()?.split('`').nth(1)?.trim_end_matches('/').to_string();
                let deps = cells.get(2)?.split(',').filter_map(dep_item).collect();
                Some(Row { name, what: cells.get(1)?.to_string(), deps })
            })
            .collect()
    }

    fn dep_item(item: &str) -> Option<(String, bool)> {
        let name: String = item.trim().trim_matches('`').chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect();
        (!name.is_empty()).then(|| (name, item.contains("(optional)")))
    }

    /// A manifest's normal dependencies (name -> optional) that `internal` accepts, given the
    /// dependency's name and its declaration.
    pub fn deps(manifest: &str, internal: &dyn Fn(&str, &str) -> Option<String>) -> BTreeMap<String, bool> {
        let mut out = BTreeMap::new();
        let mut section = String::new();
        for line in manifest.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
            if line.starts_with('[') {
                section = line.trim_matches(|c| c == '[' || c == ']').to_string();
                if let Some(name) = section.strip_prefix("dependencies.") {
                    if let Some(n) = internal(name, "") {
                        out.insert(n, false);
                    }
                }
                continue;
            }
            let normal = section == "dependencies" || (section.starts_with("target.") && section.ends_with(".dependencies"));
            let Some((key, value)) = line.split_once('=') else { continue };
            let optional = value.replace(' ', "").contains("optional=true");
            if normal {
                let key = key.trim().trim_end_matches(".workspace").trim();
                if let Some(n) = internal(key, value) {
                    out.insert(n, optional);
                }
            } else if let Some(name) = section.strip_prefix("dependencies.") {
                if key.trim() == "optional" && optional_value(value) {
                    if let Some(n) = internal(name, "") {
                        out.insert(n, true);
                    }
                }
            }
        }
        out
    }

    fn optional_value(v: &str) -> bool {
        v.trim() == "true"
    }

    /// The quoted value of `key = "…"` in a declaration.
    fn quoted<'a>(decl: &'a str, key: &str) -> Option<&'a str> {
        let rest = &decl[decl.find(&format!("{key} ="))?..];
        rest.split('"').nth(1)
    }

    /// The crate's top-level modules.
    fn top_modules(dir: &Path) -> BTreeSet<String> {
        ["lib.rs", "main.rs"]
            .iter()
            .filter_map(|f| fs::read_to_string(dir.join("src").join(f)).ok())
            .flat_map(|src| scan::scan(&src).mods.into_iter().filter(|(at, _, _)| at.is_empty()).map(|(_, name, _)| name))
            .collect()
    }

    /// What the row of each crate should say: its modules (or fuzz targets) and dependencies.
    fn expected(ws: &Path) -> BTreeMap<String, (BTreeSet<String>, BTreeMap<String, bool>)> {
        let root = fs::read_to_string(ws.join("Cargo.toml")).expect("read Cargo.toml");
        // The workspace's own crates, as [workspace.dependencies] names them: key -> directory.
        let members: BTreeMap<String, String> = root
            .lines()
            .filter_map(|l| {
                let (key, decl) = l.split_once('=')?;
                let dir = quoted(decl, "path")?.strip_prefix("crates/")?;
                Some((key.trim().to_string(), dir.to_string()))
            })
            .collect();
        let mut out = BTreeMap::new();
        for (name, dir) in crate_dirs(ws) {
            let manifest = fs::read_to_string(dir.join("Cargo.toml")).expect("read a crate's Cargo.toml");
            let internal = |key: &str, decl: &str| members.get(key).cloned().or_else(|| quoted(decl, "path").and_then(|p| p.rsplit('/').next()).map(str::to_string));
            out.insert(name, (top_modules(&dir), deps(&manifest, &internal)));
        }
        if let Ok(manifest) = fs::read_to_string(ws.join("fuzz/Cargo.toml")) {
            let internal = |_: &str, decl: &str| quoted(decl, "path").and_then(|p| p.strip_prefix("../crates/")).map(str::to_string);
            let targets = manifest.lines().filter(|l| l.trim_start().starts_with("name =")).skip(1).filter_map(|l| quoted(l, "name")).map(str::to_string).collect();
            out.insert("fuzz".to_string(), (targets, deps(&manifest, &internal)));
        }
        out
    }

    pub fn check(ws: &Path, doc: &str) -> Vec<String> {
        compare(&rows(doc), &expected(ws))
    }

    pub fn compare(rows: &[Row], expected: &BTreeMap<String, (BTreeSet<String>, BTreeMap<String, bool>)>) -> Vec<String> {
        let mut problems = Vec::new();
        for row in rows.iter().filter(|r| !expected.contains_key(&r.name)) {
            problems.push(format!("row `{}`: no such crate (a crate is a directory under crates/ with a Cargo.toml, or fuzz/)", row.name));
        }
        for (name, (modules, deps)) in expected {
            let Some(row) = rows.iter().find(|r| &r.name == name) else {
                problems.push(format!("`{name}`: no row"));
                continue;
            };
            for m in modules.iter().filter(|m| !row.what.contains(&format!("`{m}`")) && !row.what.contains(&format!("`{m}/`"))) {
                problems.push(format!("`{name}`: \"what it is\" does not name `{m}`"));
            }
            for (d, optional) in deps {
                match row.deps.get(d) {
                    None => problems.push(format!("`{name}`: \"depends on\" misses {d}{}", if *optional { " (optional)" } else { "" })),
                    Some(marked) if marked != optional => problems.push(format!("`{name}`: \"depends on\" should mark {d} {}", if *optional { "(optional)" } else { "as not optional" })),
                    _ => {}
                }
            }
            for d in row.deps.keys().filter(|d| !deps.contains_key(*d)) {
                problems.push(format!("`{name}`: \"depends on\" lists {d}, which is not among its normal dependencies"));
            }
        }
        problems
    }
}

/// ARCHITECTURE.md as a front door: read in ten minutes, so under a size budget; one line per
/// decision, each linking to where its detail lives; every relative link pointing at a file.
pub mod front_door {
    use super::*;

    /// Bytes.
    pub const BUDGET: usize = 15_000;

    pub fn check(ws: &Path, doc: &str) -> Vec<String> {
        let mut problems = Vec::new();
        if doc.len() > BUDGET {
            problems.push(format!("{} bytes, over the budget of {BUDGET}: move detail to docs/design/", doc.len()));
        }
        let decisions = doc.split("\n## ").find(|s| s.starts_with("Decisions")).unwrap_or("");
        // Past the heading and any introduction, every line is a decision of its own.
        for line in decisions.lines().skip_while(|l| !l.starts_with("- ")).filter(|l| !l.trim().is_empty()) {
            if !line.starts_with("- ") {
                problems.push(format!("a decision runs over more than one line: {line:?}"));
            } else if !line.contains("](docs/") {
                problems.push(format!("a decision does not link to its detail under docs/: {line:?}"));
            }
        }
        for (file, anchor) in links(doc) {
            let path = ws.join(&file);
            if !path.exists() {
                problems.push(format!("a link to {file}, which does not exist"));
            } else if let Some(anchor) = anchor.filter(|_| file.ends_with(".md")) {
                let text = fs::read_to_string(&path).unwrap_or_default();
                if !text.lines().filter(|l| l.starts_with('#')).any(|h| slug(h) == anchor) {
                    problems.push(format!("a link to {file}#{anchor}, a heading {file} does not have"));
                }
            }
        }
        problems
    }

    /// Relative link targets: the file, and the anchor if any.
    pub fn links(doc: &str) -> Vec<(String, Option<String>)> {
        doc.split("](")
            .skip(1)
            .filter_map(|rest| rest.split(')').next())
            .filter(|t| !t.is_empty() && !t.starts_with('#') && !t.contains("://") && !t.starts_with("mailto:"))
            .map(|t| match t.split_once('#') {
                Some((file, anchor)) => (file.to_string(), Some(anchor.to_string())),
                None => (t.to_string(), None),
            })
            .collect()
    }

    /// A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens.
    pub fn slug(heading: &str) -> String {
        let text = heading.trim_start_matches('#').trim().to_lowercase();
        text.chars().filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_').map(|c| if c == ' ' { '-' } else { c }).collect()
    }
}

/// The scanner's and the map's rules on small inline examples.
mod rules {
    use super::circles::Tree;
    use super::*;

    /// The circles of a crate given as (path under src/, text), each as "a.rs -> b.rs".
    fn circles(files: &[(&str, &str)]) -> Vec<String> {
        let files: BTreeMap<PathBuf, String> = files.iter().map(|(p, s)| (Path::new("src").join(p), s.to_string())).collect();
        let tree = Tree::load(Path::new("src/lib.rs"), &|p: &Path| files.get(p).cloned()).unwrap();
        tree.circles().iter().map(|c| c.files.iter().map(|f| f.strip_prefix("src").unwrap().display().to_string()).collect::<Vec<_>>().join(" -> ")).collect()
    }

    #[test]
    fn a_circle_is_found_and_told_with_file_and_line() {
        let files = [("lib.rs", "mod a;\nmod b;\n"), ("a.rs", "use crate::b::B;\npub struct A;\n"), ("b.rs", "pub struct B;\n\nfn f() -> crate::a::A { todo!() }\n")];
        assert_eq!(circles(&files), ["a.rs -> b.rs"]);
        let map: BTreeMap<PathBuf, String> = files.iter().map(|(p, s)| (Path::new("src").join(p), s.to_string())).collect();
        let text = Tree::load(Path::new("src/lib.rs"), &|p: &Path| map.get(p).cloned()).unwrap().circles()[0].describe(Path::new(""));
        assert!(text.contains("src/a.rs:1 names src/b.rs: use crate::b::B;"), "{text}");
        assert!(text.contains("src/b.rs:3 names src/a.rs: fn f() -> crate::a::A { todo!() }"), "{text}");
    }

    #[test]
    fn no_circle_in_a_tree_of_leaves() {
        let files = [("lib.rs", "mod a;\nmod b;\npub use b::B;\n"), ("a.rs", "use crate::B;\nuse super::b;\n"), ("b.rs", "pub struct B;\n")];
        assert!(circles(&files).is_empty());
    }

    #[test]
    fn a_re_export_is_followed_to_its_module() {
        // a names `crate::B`, which lib.rs re-exports from b: the edge is a -> b, so with b -> a a circle.
        let files = [("lib.rs", "mod a;\nmod b;\npub use self::b::{B as Bee, C};\n"), ("a.rs", "use crate::Bee;\npub struct A;\n"), ("b.rs", "pub struct B;\npub struct C;\nuse crate::a::A;\n")];
        assert_eq!(circles(&files), ["a.rs -> b.rs"]);
        // A glob re-export brings what its module defines.
        let files = [("lib.rs", "mod a;\nmod b;\npub use b::*;\n"), ("a.rs", "fn f(_: crate::B) {}\npub struct A;\n"), ("b.rs", "pub struct B;\nuse crate::a::A;\n")];
        assert_eq!(circles(&files), ["a.rs -> b.rs"]);
        // Without the re-export, `crate::B` is lib.rs's own, and lib.rs names nobody: no circle.
        let files = [("lib.rs", "mod a;\nmod b;\npub struct B;\n"), ("a.rs", "use crate::B;\npub struct A;\n"), ("b.rs", "use crate::a::A;\n")];
        assert!(circles(&files).is_empty());
    }

    #[test]
    fn test_items_comments_and_strings_are_ignored() {
        let a = "pub struct A;\n// crate::b::B\n/* crate::b::B /* nested */ crate::b::B */\nconst S: &str = \"crate::b::B\";\nconst R: &str = r#\"crate::b \"B\" {\"#;\nconst C: char = '{';\nfn g<'a>(x: &'a str) -> &'a str { x }\n#[cfg(test)]\nmod tests {\n    use crate::b::B;\n}\n#[cfg(test)]\nfn helper() { crate::b::f() }\n#[cfg(test)]\nuse crate::b::B;\n";
        let files = [("lib.rs", "mod a;\nmod b;\n"), ("a.rs", a), ("b.rs", "use crate::a::A;\npub fn f() {}\npub struct B;\n")];
        assert!(circles(&files).is_empty());
        // An intra-doc link is a name rustdoc resolves: it counts.
        let files = [("lib.rs", "mod a;\nmod b;\n"), ("a.rs", "//! Driven by [`crate::b`].\n"), ("b.rs", "use crate::a;\n")];
        assert_eq!(circles(&files), ["a.rs -> b.rs"]);
        // …but code after them still counts.
        let files = [("lib.rs", "mod a;\nmod b;\n"), ("a.rs", &format!("{a}fn late() {{ crate::b::f() }}\n")), ("b.rs", "use crate::a::A;\npub fn f() {}\n")];
        assert_eq!(circles(&files), ["a.rs -> b.rs"]);
    }

    #[test]
    fn a_use_group_is_split_into_its_paths() {
        let files = [
            ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("a.rs", "use crate::{\n    c::C,\n    b::{self, inner::{X, Y as Z}},\n};\n"),
            ("b.rs", "pub mod inner;\nuse crate::a;\n"),
            ("b/inner.rs", "pub struct X;\npub struct Y;\n"),
            ("c.rs", "pub struct C;\n"),
        ];
        assert_eq!(circles(&files), ["a.rs -> b.rs"]);
        // The group's leaf deep in b/inner.rs: a -> b/inner.rs; inner naming a closes that circle.
        let files = [("lib.rs", "mod a;\nmod b;\n"), ("a.rs", "use crate::{b::{inner::{X}}};\n"), ("b/mod.rs", "pub mod inner;\n"), ("b/inner.rs", "pub struct X;\nuse crate::a;\n")];
        assert_eq!(circles(&files), ["a.rs -> b/inner.rs"]);
    }

    #[test]
    fn a_child_naming_its_parent_counts_and_super_is_the_inline_module() {
        // The facade with logic names its child, the child its parent: a circle.
        let files = [("lib.rs", "mod x;\n"), ("x/mod.rs", "mod y;\npub fn f() { crate::x::y::g() }\n"), ("x/y.rs", "use super::f;\npub fn g() {}\n")];
        assert_eq!(circles(&files), ["x/mod.rs -> x/y.rs"]);
        // `self::` and bare paths to children are the tree's own direction.
        let files = [("lib.rs", "mod x;\n"), ("x/mod.rs", "mod y;\npub fn f() { self::y::g(); y::g() }\n"), ("x/y.rs", "use super::f;\npub fn g() {}\n")];
        assert!(circles(&files).is_empty());
        // `super::` in an inline module of a.rs is a.rs itself, not lib.rs.
        let files = [("lib.rs", "mod a;\npub fn f() { crate::a::g() }\n"), ("a.rs", "pub fn g() {}\nmod inner {\n    use super::g;\n}\n")];
        assert!(circles(&files).is_empty());
    }

    #[test]
    fn links_and_anchors_are_read_as_github_makes_them() {
        assert_eq!(front_door::slug("## The handoff preconditions, and why each exists"), "the-handoff-preconditions-and-why-each-exists");
        assert_eq!(front_door::slug("### `transport` on a leaf codec"), "transport-on-a-leaf-codec");
        let links = front_door::links("[a](docs/x.md#y) [b](https://e.org) [c](#local) [d](CHANGELOG.md)");
        assert_eq!(links, [("docs/x.md".to_string(), Some("y".to_string())), ("CHANGELOG.md".to_string(), None)]);
    }

    #[test]
    fn the_map_is_compared_with_modules_and_manifests() {
        let doc = "# x\n\n## The crates\n\n| crate | what it is | depends on |\n|---|---|---|\n| `a` | does: `one`, `two/` | b, c (optional) |\n| `gone` | – | – |\n\n## Next\n";
        let members = |k: &str, _: &str| ["b", "c", "d"].contains(&k).then(|| k.to_string());
        let manifest = "[dependencies]\nb.workspace = true\nc = { workspace = true, optional = true }\nserde = \"1\"\n[target.'cfg(unix)'.dependencies]\nd = { workspace = true }\n[dev-dependencies]\nb.workspace = true\nzz = { path = \"x\" }\n";
        let deps = map::deps(manifest, &members);
        assert_eq!(deps, BTreeMap::from([("b".into(), false), ("c".into(), true), ("d".into(), false)]));
        let modules = BTreeSet::from(["one".to_string(), "two".to_string(), "three".to_string()]);
        let problems = map::compare(&map::rows(doc), &BTreeMap::from([("a".to_string(), (modules, deps))]));
        assert_eq!(
            problems,
            ["row `gone`: no such crate (a crate is a directory under crates/ with a Cargo.toml, or fuzz/)", "`a`: \"what it is\" does not name `three`", "`a`: \"depends on\" misses d"]
        );
    }
}
