//! SQL fingerprints: the statement with its values taken out, so that the same query with
//! other parameters groups together (`WHERE id = 42` and `WHERE id = 43`), while different
//! queries stay apart.
//!
//! Text is split by sqlparser's tokenizer (dialect from `db.system`); what it cannot tokenize
//! (an unterminated string in a truncated statement, say) goes through a small scanner of our
//! own instead, and the fingerprint says which path made it. The rules are those of
//! `shared/research/db-calls.md` §12: comments go, literals and placeholders of every style
//! become `?`, IN lists and multi-row VALUES of any length collapse, `= ANY(...)` is `IN`,
//! identifiers lose their quotes, digit runs in names (partitions, shards) become `{n}`,
//! savepoint names go, keywords are upper case and whitespace is one space.

pub use kiln_record::schema::queries::StatementClass;
use std::fmt::Write as _;

use serde::Serialize;
use sqlparser::dialect::{Dialect, GenericDialect, MsSqlDialect, MySqlDialect};
use sqlparser::tokenizer::{Token, Tokenizer};
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

/// Bumped whenever a rule changes, so that a changed fingerprint is a deliberate change.
pub const FINGERPRINT_VERSION: u8 = 1;

/// How the fingerprint was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Tokenizer,
    Fallback,
    /// Not SQL: a JSON document (MongoDB, search bodies; see `nosql`).
    Document,
    /// Not SQL: a command and its arguments (Redis; see `nosql`).
    Command,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Fingerprint {
    /// 16 hex digits of xxh3(version, dialect family, shape).
    pub id: String,
    /// The normalized statement.
    pub shape: String,
    /// `{operation} {table} ...` as OpenTelemetry's `db.query.summary`.
    pub summary: String,
    pub class: StatementClass,
    /// The longest `IN (...)` / `ANY(ARRAY[...])` list of values, 0 when there is none: a list
    /// longer than 1 means batched access, not an N+1.
    pub in_list_max: u32,
    /// Rows of a multi-row VALUES.
    pub values_rows: u32,
    /// Hash of the literal values the text carried; None when it carried none.
    pub literals: Option<u64>,
    /// The text has placeholders (`?`, `$1`, `%s` ...): its values were bound apart.
    pub placeholders: bool,
    pub mode: Mode,
}

#[derive(Clone, Debug, PartialEq)]
enum Piece {
    Kw(String),
    /// A name as written (without its quotes); the shape lower-cases unquoted names.
    Ident(String, bool),
    Param,
    /// A collapsed list of values, `(?)`, with its length.
    List(u32),
    Sym(String),
}

impl Piece {
    fn is_kw(&self, word: &str) -> bool {
        matches!(self, Piece::Kw(k) if k == word)
    }
    fn is_sym(&self, sym: &str) -> bool {
        matches!(self, Piece::Sym(s) if s == sym)
    }
    /// A piece after which `-` is a binary minus, not a sign.
    fn is_operand(&self) -> bool {
        matches!(self, Piece::Ident(..) | Piece::Param | Piece::List(_)) || self.is_sym(")")
    }
}

/// Which tokenizer rules a database speaks: MySQL's double quotes are strings, everyone
/// else's are identifiers.
fn dialect_for(system: &str) -> (&'static str, Box<dyn Dialect>) {
    let family = dialect_family(system);
    match family {
        "mysql" => (family, Box::new(MySqlDialect {})),
        "mssql" => (family, Box::new(MsSqlDialect {})),
        _ => (family, Box::new(GenericDialect {})),
    }
}

fn dialect_family(system: &str) -> &'static str {
    let system = system.to_ascii_lowercase();
    if system.contains("mysql") || system.contains("mariadb") || system == "tidb" {
        "mysql"
    } else if system.contains("mssql") || system.contains("sql_server") {
        "mssql"
    } else {
        "generic"
    }
}

/// Words written in upper case in a shape; any other word is a name and is written in
/// lower case (an ORM's `name` column is not the keyword NAME).
const KEYWORDS: &[&str] = &[
    "ALL",
    "ALTER",
    "AND",
    "ANY",
    "ARRAY",
    "AS",
    "ASC",
    "BEGIN",
    "BETWEEN",
    "BY",
    "CALL",
    "CASE",
    "CAST",
    "COMMIT",
    "CONFLICT",
    "COPY",
    "CREATE",
    "CROSS",
    "DEALLOCATE",
    "DEFAULT",
    "DELETE",
    "DESC",
    "DISCARD",
    "DISTINCT",
    "DO",
    "DROP",
    "ELSE",
    "END",
    "EXCEPT",
    "EXEC",
    "EXECUTE",
    "EXISTS",
    "FALSE",
    "FETCH",
    "FIRST",
    "FOR",
    "FROM",
    "FULL",
    "GROUP",
    "HAVING",
    "ILIKE",
    "IN",
    "INNER",
    "INSERT",
    "INTERSECT",
    "INTO",
    "IS",
    "ISOLATION",
    "JOIN",
    "LATERAL",
    "LEFT",
    "LEVEL",
    "LIKE",
    "LIMIT",
    "LISTEN",
    "LOCKED",
    "MERGE",
    "NEXT",
    "NOT",
    "NOTHING",
    "NOWAIT",
    "NULL",
    "OFFSET",
    "ON",
    "ONLY",
    "OR",
    "ORDER",
    "OUTER",
    "OVER",
    "PARTITION",
    "PREPARE",
    "READ",
    "RELEASE",
    "REPLACE",
    "RESET",
    "RETURNING",
    "RIGHT",
    "ROLLBACK",
    "ROW",
    "ROWS",
    "SAVEPOINT",
    "SELECT",
    "SESSION",
    "SET",
    "SHARE",
    "SHOW",
    "SKIP",
    "START",
    "TABLE",
    "THEN",
    "TO",
    "TOP",
    "TRANSACTION",
    "TRUE",
    "TRUNCATE",
    "UNION",
    "UNLISTEN",
    "UPDATE",
    "UPSERT",
    "USE",
    "USING",
    "VALUES",
    "WHEN",
    "WHERE",
    "WITH",
    "WORK",
    "WRITE",
];

fn keyword(word: &str) -> Option<String> {
    let upper = word.to_ascii_uppercase();
    KEYWORDS.binary_search(&upper.as_str()).ok().map(|_| upper)
}

/// Digit runs of two or more and hex runs of eight or more inside a name become `{n}`, so
/// `events_202401` and `events_202402` are one table (libpg_query, Sentry's Relay); a single
/// digit stays, `t1` and `t2` are different tables.
fn generalize_name(name: &str) -> String {
    let bytes = name.as_bytes();
    let mut out = String::with_capacity(name.len());
    let mut i = 0;
    while i < bytes.len() {
        let digits = bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        let hex = bytes[i..]
            .iter()
            .take_while(|b| b.is_ascii_hexdigit())
            .count();
        let starts_run = i == 0 || !bytes[i - 1].is_ascii_alphanumeric() || digits > 0;
        if digits >= 2 && (hex < 8 || !starts_run) {
            out.push_str("{n}");
            i += digits;
        } else if hex >= 8 && starts_run && bytes[i..i + hex].iter().any(u8::is_ascii_digit) {
            out.push_str("{n}");
            i += hex;
        } else {
            let ch = name[i..].chars().next().unwrap_or('?');
            out.push(ch);
            i += ch.len_utf8().max(1);
        }
    }
    out
}

fn name_piece(name: &str, quoted: bool) -> Piece {
    Piece::Ident(name.to_string(), quoted)
}

/// Builds pieces, hashing literal values on the way.
struct Pieces {
    out: Vec<Piece>,
    literals: Option<Xxh3>,
    placeholders: bool,
}

impl Pieces {
    fn new() -> Self {
        Self {
            out: Vec::new(),
            literals: None,
            placeholders: false,
        }
    }
    fn literal(&mut self, value: &str) {
        let hasher = self.literals.get_or_insert_with(Xxh3::new);
        hasher.update(value.as_bytes());
        hasher.update(&[0xff]);
        self.push_value();
    }
    fn placeholder(&mut self) {
        self.placeholders = true;
        self.push_value();
    }
    /// A value; a sign just before it that is not a binary minus becomes part of it.
    fn push_value(&mut self) {
        let n = self.out.len();
        if n >= 1
            && (self.out[n - 1].is_sym("-") || self.out[n - 1].is_sym("+"))
            && (n == 1 || !self.out[n - 2].is_operand())
        {
            self.out.pop();
        }
        self.out.push(Piece::Param);
    }
    fn last(&self) -> Option<&Piece> {
        self.out.last()
    }
    fn word(&mut self, word: &str) {
        if let Some(stripped) = word.strip_prefix('@') {
            if stripped.starts_with('@') {
                // @@session.tx_read_only: a server variable, kept as written.
                self.out.push(Piece::Ident(word.to_string(), false));
            } else {
                // @p1, @name: SQL Server parameters.
                self.placeholder();
            }
            return;
        }
        if word.starts_with('$') && word[1..].bytes().all(|b| b.is_ascii_digit()) && word.len() > 1
        {
            self.placeholder();
            return;
        }
        // a name, whatever it spells, after a dot (dbo.Table) or where a table goes
        let name_expected = self.last().is_some_and(|p| {
            p.is_sym(".") || p.is_kw("FROM") || p.is_kw("JOIN") || p.is_kw("INTO")
        });
        match keyword(word) {
            Some(k) if name_expected && !matches!(k.as_str(), "LATERAL" | "ONLY" | "SELECT") => {
                self.out.push(name_piece(word, false))
            }
            None if name_expected => self.out.push(name_piece(word, false)),
            Some(k) if k == "TRUE" || k == "FALSE" => self.literal(&k),
            Some(k) => self.out.push(Piece::Kw(k)),
            None => self.out.push(name_piece(word, false)),
        }
    }
}

fn tokenize_pieces(text: &str, dialect: &dyn Dialect) -> Option<Pieces> {
    let tokens = Tokenizer::new(dialect, text).tokenize().ok()?;
    let tokens: Vec<Token> = tokens
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::EOF))
        .collect();
    let mut p = Pieces::new();
    let mut i = 0;
    while i < tokens.len() {
        let token = &tokens[i];
        i += 1;
        match token {
            Token::Word(w) => match w.quote_style {
                Some(_) => p.out.push(name_piece(&w.value, true)),
                None => p.word(&w.value),
            },
            Token::Number(n, _) => {
                // 0xDEADBEEF arrives as the number 0 and the word xDEADBEEF
                match tokens.get(i) {
                    Some(Token::Word(w))
                        if n == "0"
                            && w.quote_style.is_none()
                            && w.value.len() > 1
                            && w.value.starts_with(['x', 'X'])
                            && w.value[1..].bytes().all(|b| b.is_ascii_hexdigit()) =>
                    {
                        i += 1;
                        p.literal(&w.value);
                    }
                    _ => p.literal(n),
                }
            }
            Token::SingleQuotedString(s)
            | Token::DoubleQuotedString(s)
            | Token::TripleSingleQuotedString(s)
            | Token::TripleDoubleQuotedString(s)
            | Token::SingleQuotedByteStringLiteral(s)
            | Token::DoubleQuotedByteStringLiteral(s)
            | Token::TripleSingleQuotedByteStringLiteral(s)
            | Token::TripleDoubleQuotedByteStringLiteral(s)
            | Token::SingleQuotedRawStringLiteral(s)
            | Token::DoubleQuotedRawStringLiteral(s)
            | Token::TripleSingleQuotedRawStringLiteral(s)
            | Token::TripleDoubleQuotedRawStringLiteral(s)
            | Token::NationalStringLiteral(s)
            | Token::EscapedStringLiteral(s)
            | Token::UnicodeStringLiteral(s)
            | Token::HexStringLiteral(s) => p.literal(s),
            Token::DollarQuotedString(s) => p.literal(&s.value),
            Token::Placeholder(_) | Token::Question => p.placeholder(),
            Token::Mod => {
                // psycopg's %s and %(name)s
                let is_word = |k: usize, v: &str| matches!(tokens.get(k), Some(Token::Word(w)) if w.value == v && w.quote_style.is_none());
                if is_word(i, "s") {
                    i += 1;
                    p.placeholder();
                } else if matches!(tokens.get(i), Some(Token::LParen))
                    && matches!(tokens.get(i + 1), Some(Token::Word(_)))
                    && matches!(tokens.get(i + 2), Some(Token::RParen))
                    && is_word(i + 3, "s")
                {
                    i += 4;
                    p.placeholder();
                } else {
                    p.out.push(Piece::Sym("%".into()));
                }
            }
            Token::Colon
                if matches!(tokens.get(i), Some(Token::Word(_)))
                    && !p.last().is_some_and(Piece::is_operand) =>
            {
                // :name (named binds of JDBC templates, Oracle, SQLAlchemy text())
                i += 1;
                p.placeholder();
            }
            Token::DoubleColon if matches!(p.last(), Some(Piece::Param)) => {
                // '2024-01-01'::date is a value, whatever its type
                if matches!(tokens.get(i), Some(Token::Word(_))) {
                    i += 1;
                }
                while matches!(tokens.get(i), Some(Token::LBracket))
                    && matches!(tokens.get(i + 1), Some(Token::RBracket))
                {
                    i += 2;
                }
            }
            Token::SemiColon if i == tokens.len() => {}
            other => p.out.push(Piece::Sym(other.to_string())),
        }
    }
    Some(p)
}

/// The scanner used when the tokenizer gives up: comments, quoted strings (to the end of the
/// text when unterminated), numbers, words and single symbols.
fn scan_pieces(text: &str) -> Pieces {
    let mut p = Pieces::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '-' && next == Some('-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                i += 1;
            }
            i += 2;
        } else if c == '\'' || c == '"' || c == '`' {
            let start = i + 1;
            i += 1;
            while i < chars.len() {
                if chars[i] == c && chars.get(i + 1) == Some(&c) {
                    i += 2;
                } else if chars[i] == c {
                    break;
                } else {
                    i += 1;
                }
            }
            let value: String = chars[start..i.min(chars.len())].iter().collect();
            i += 1;
            if c == '\'' {
                p.literal(&value);
            } else {
                p.out.push(name_piece(&value, true));
            }
        } else if c.is_ascii_digit() || (c == '.' && next.is_some_and(|n| n.is_ascii_digit())) {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            let value: String = chars[start..i].iter().collect();
            p.literal(&value);
        } else if c.is_alphanumeric() || c == '_' || c == '@' || c == '$' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || matches!(chars[i], '_' | '@' | '$'))
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            p.word(&word);
        } else if c == '?' {
            i += 1;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            p.placeholder();
        } else if c == '%' && next == Some('s') {
            i += 2;
            p.placeholder();
        } else {
            i += 1;
            if !(c == ';' && chars[i..].iter().all(|c| c.is_whitespace())) {
                p.out.push(Piece::Sym(c.to_string()));
            }
        }
    }
    p
}

/// `( ? , ? , ? )` becomes one list piece; `= ANY ( list )` and `ARRAY [ ... ]` read as IN.
fn collapse_lists(pieces: Vec<Piece>) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::with_capacity(pieces.len());
    let mut i = 0;
    while i < pieces.len() {
        let (open, close) = match &pieces[i] {
            Piece::Sym(s) if s == "(" => ("(", ")"),
            Piece::Sym(s) if s == "[" => ("[", "]"),
            _ => ("", ""),
        };
        if !open.is_empty() {
            // a run of values separated by commas, up to the closing bracket
            let mut j = i + 1;
            let mut count = 0u32;
            let mut ok = false;
            while j < pieces.len() {
                match &pieces[j] {
                    Piece::Param | Piece::List(_) => {
                        count += match &pieces[j] {
                            Piece::List(n) => *n,
                            _ => 1,
                        };
                        j += 1;
                        match pieces.get(j) {
                            Some(p) if p.is_sym(",") => j += 1,
                            Some(p) if p.is_sym(close) => {
                                ok = true;
                                break;
                            }
                            _ => break,
                        }
                    }
                    _ => break,
                }
            }
            if ok {
                // ARRAY [ ... ] is a list; keep the ARRAY word out of the shape
                if open == "[" && out.last().is_some_and(|p| p.is_kw("ARRAY")) {
                    out.pop();
                }
                out.push(Piece::List(count));
                i = j + 1;
                continue;
            }
        }
        out.push(pieces[i].clone());
        i += 1;
    }
    // ( list ) -> list, as ANY(ARRAY[...]) leaves it; then = ANY list -> IN list
    let mut merged: Vec<Piece> = Vec::with_capacity(out.len());
    for piece in out {
        let n = merged.len();
        let list = match piece {
            Piece::List(len) => len,
            _ if piece.is_sym(")") && n >= 2 && merged[n - 2].is_sym("(") => match merged[n - 1] {
                Piece::List(len) => {
                    merged.truncate(n - 2);
                    len
                }
                _ => {
                    merged.push(piece);
                    continue;
                }
            },
            _ => {
                merged.push(piece);
                continue;
            }
        };
        let n = merged.len();
        if n >= 2 && merged[n - 1].is_kw("ANY") && merged[n - 2].is_sym("=") {
            merged.truncate(n - 2);
            merged.push(Piece::Kw("IN".into()));
        }
        merged.push(Piece::List(list));
    }
    merged
}

/// `VALUES (?), (?), (?)` becomes one row; returns the row count.
fn collapse_values_rows(pieces: &mut Vec<Piece>) -> u32 {
    let mut rows_max = 0;
    let mut i = 0;
    while i < pieces.len() {
        if pieces[i].is_kw("VALUES") && matches!(pieces.get(i + 1), Some(Piece::List(_))) {
            let mut rows = 1;
            let mut j = i + 2;
            while pieces.get(j).is_some_and(|p| p.is_sym(","))
                && matches!(pieces.get(j + 1), Some(Piece::List(_)))
            {
                rows += 1;
                j += 2;
            }
            pieces.drain(i + 2..j);
            rows_max = rows_max.max(rows);
        }
        i += 1;
    }
    rows_max
}

/// Savepoint names are the driver's counters, not part of the statement.
fn drop_savepoint_names(pieces: &mut [Piece]) {
    for i in 1..pieces.len() {
        if pieces[i - 1].is_kw("SAVEPOINT") && matches!(pieces[i], Piece::Ident(..)) {
            pieces[i] = Piece::Param;
        }
    }
}

fn render(pieces: &[Piece]) -> String {
    let mut out = String::new();
    let mut glue_next = true;
    let mut name;
    for piece in pieces {
        let (text, glue_before, glue_after): (&str, bool, bool) = match piece {
            Piece::Kw(s) => (s, false, false),
            Piece::Ident(s, quoted) => {
                name = if *quoted {
                    generalize_name(s)
                } else {
                    generalize_name(&s.to_lowercase())
                };
                (&name, false, false)
            }
            Piece::Param => ("?", false, false),
            Piece::List(_) => ("(?)", false, false),
            Piece::Sym(s) => match s.as_str() {
                "," => (",", true, false),
                ")" | "]" => (s, true, false),
                "(" | "[" => (s, false, true),
                "." | "::" => (s, true, true),
                _ => (s, false, false),
            },
        };
        if !(out.is_empty() || glue_before || glue_next) {
            out.push(' ');
        }
        out.push_str(text);
        glue_next = glue_after;
    }
    out
}

fn classify(pieces: &[Piece]) -> StatementClass {
    let first = match pieces.first() {
        None => return StatementClass::Housekeeping, // a comment-only ping
        Some(Piece::Kw(k)) => k.as_str(),
        Some(_) => return StatementClass::Other,
    };
    match first {
        "SELECT" => {
            let rest = &pieces[1..];
            let is_ping = matches!(rest, [Piece::Param])
                || matches!(rest, [Piece::Ident(v, false), p1, p2] if v.eq_ignore_ascii_case("version") && p1.is_sym("(") && p2.is_sym(")"));
            let is_variable =
                matches!(rest.first(), Some(Piece::Ident(v, _)) if v.starts_with("@@"));
            if is_ping || is_variable {
                StatementClass::Housekeeping
            } else {
                StatementClass::Read
            }
        }
        "WITH" => {
            if pieces.iter().any(|p| {
                p.is_kw("INSERT") || p.is_kw("UPDATE") || p.is_kw("DELETE") || p.is_kw("MERGE")
            }) {
                StatementClass::Write
            } else {
                StatementClass::Read
            }
        }
        "VALUES" | "TABLE" => StatementClass::Read,
        "INSERT" | "UPDATE" | "DELETE" | "MERGE" | "REPLACE" | "UPSERT" | "COPY" => {
            StatementClass::Write
        }
        "CREATE" | "ALTER" | "DROP" | "TRUNCATE" => StatementClass::Ddl,
        "BEGIN" | "START" | "COMMIT" | "ROLLBACK" | "END" | "SAVEPOINT" | "RELEASE" | "SET"
        | "SHOW" | "DEALLOCATE" | "DISCARD" | "RESET" | "LISTEN" | "UNLISTEN" | "USE" => {
            StatementClass::Housekeeping
        }
        _ => StatementClass::Other,
    }
}

/// A dotted name (`schema.table`) starting at `i`, and the index after it.
fn dotted_name(pieces: &[Piece], mut i: usize) -> Option<(String, usize)> {
    let mut name = match pieces.get(i) {
        Some(Piece::Ident(s, _)) => s.clone(),
        _ => return None,
    };
    i += 1;
    while pieces.get(i).is_some_and(|p| p.is_sym(".")) {
        match pieces.get(i + 1) {
            Some(Piece::Ident(s, _)) => {
                name.push('.');
                name.push_str(s);
                i += 2;
            }
            _ => break,
        }
    }
    Some((name, i))
}

/// `CREATE UNIQUE INDEX ix ON t (...)` -> `CREATE INDEX ix`: the operation, the kind of object
/// and its name, as OpenTelemetry summarizes DDL.
fn summarize_ddl(op: &str, pieces: &[Piece]) -> String {
    const MODIFIERS: &[&str] = &[
        "UNIQUE",
        "CLUSTERED",
        "NONCLUSTERED",
        "OR",
        "REPLACE",
        "TEMP",
        "TEMPORARY",
        "MATERIALIZED",
        "IF",
        "NOT",
        "EXISTS",
        "GLOBAL",
        "LOCAL",
        "UNLOGGED",
        "CONCURRENTLY",
    ];
    let word = |p: &Piece| match p {
        Piece::Kw(s) | Piece::Ident(s, false) => Some(s.to_ascii_uppercase()),
        _ => None,
    };
    let mut i = 1;
    while pieces
        .get(i)
        .and_then(word)
        .is_some_and(|w| MODIFIERS.contains(&w.as_str()))
    {
        i += 1;
    }
    let Some(kind) = pieces.get(i).and_then(word) else {
        return op.to_string();
    };
    i += 1;
    while pieces
        .get(i)
        .and_then(word)
        .is_some_and(|w| MODIFIERS.contains(&w.as_str()))
    {
        i += 1;
    }
    match dotted_name(pieces, i) {
        Some((name, _)) => format!("{op} {kind} {name}"),
        None => format!("{op} {kind}"),
    }
}

fn follows_set_operator(pieces: &[Piece], i: usize) -> bool {
    let is_set_op = |p: &Piece| p.is_kw("UNION") || p.is_kw("INTERSECT") || p.is_kw("EXCEPT");
    match i {
        0 => false,
        1 => is_set_op(&pieces[0]),
        _ => {
            is_set_op(&pieces[i - 1])
                || ((pieces[i - 1].is_kw("ALL") || pieces[i - 1].is_kw("DISTINCT"))
                    && is_set_op(&pieces[i - 2]))
        }
    }
}

/// OpenTelemetry's `db.query.summary`: each operation, then the tables it names, in order,
/// no longer than 255 bytes (a name that would not fit is left out, not cut).
fn summarize(pieces: &[Piece]) -> String {
    if let Some(Piece::Kw(op)) = pieces.first() {
        if matches!(op.as_str(), "CREATE" | "ALTER" | "DROP") {
            return summarize_ddl(op, pieces);
        }
    }
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < pieces.len() {
        match &pieces[i] {
            // FOR UPDATE and ON CONFLICT DO UPDATE are not operations of their own
            Piece::Kw(k)
                if k == "UPDATE"
                    && i > 0
                    && (pieces[i - 1].is_kw("FOR") || pieces[i - 1].is_kw("DO")) => {}
            // the SELECTs of a UNION are one operation
            Piece::Kw(k) if k == "SELECT" && follows_set_operator(pieces, i) => {}
            Piece::Kw(k)
                if matches!(
                    k.as_str(),
                    "SELECT"
                        | "INSERT"
                        | "UPDATE"
                        | "DELETE"
                        | "MERGE"
                        | "CALL"
                        | "EXEC"
                        | "EXECUTE"
                        | "TRUNCATE"
                        | "REPLACE"
                        | "COPY"
                ) =>
            {
                parts.push(k.clone());
                if matches!(k.as_str(), "UPDATE" | "CALL" | "EXEC" | "EXECUTE" | "COPY") {
                    if let Some((name, next)) = dotted_name(pieces, i + 1) {
                        parts.push(name);
                        i = next;
                        continue;
                    }
                }
            }
            Piece::Kw(k) if matches!(k.as_str(), "FROM" | "JOIN" | "INTO" | "TABLE" | "USING") => {
                // FROM a, b x, c AS y: every table of the list
                let mut j = i + 1;
                while let Some((name, next)) = dotted_name(pieces, j) {
                    parts.push(name);
                    j = next;
                    if pieces.get(j).is_some_and(|p| p.is_kw("AS")) {
                        j += 1;
                    }
                    if matches!(pieces.get(j), Some(Piece::Ident(..))) {
                        j += 1; // alias
                    }
                    if k == "FROM" && pieces.get(j).is_some_and(|p| p.is_sym(",")) {
                        j += 1;
                    } else {
                        break;
                    }
                }
                i = j.max(i + 1);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    let mut summary = String::new();
    for part in parts {
        if summary.len() + 1 + part.len() > 255 {
            break;
        }
        if !summary.is_empty() {
            summary.push(' ');
        }
        summary.push_str(&part);
    }
    summary
}

/// A statement with its values masked out, and a hash of those values: the cheap first step
/// of fingerprinting many statements. Two texts with the same mask differ only in literal
/// values (numbers outside names, quoted strings, dollar-quoted bodies, TRUE/FALSE),
/// comments and whitespace -- all of which fingerprinting removes -- so they have the same
/// fingerprint, and the tokenizer need only run once per mask.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Masked {
    pub mask: String,
    /// Hash of the masked values in order; None when there were none.
    pub values: Option<u64>,
}

/// Masks `text` as sent to `system` (see [`Masked`]).
pub fn mask(system: &str, text: &str) -> Masked {
    let family = dialect_family(system);
    let mysql = family == "mysql";
    let b = text.as_bytes();
    let mut mask = Vec::with_capacity(b.len());
    mask.extend_from_slice(family.as_bytes());
    mask.push(0);
    let mut values: Option<Xxh3> = None;
    let mut value = |bytes: &[u8], mask: &mut Vec<u8>| {
        let h = values.get_or_insert_with(Xxh3::new);
        h.update(bytes);
        h.update(&[0xff]);
        mask.push(0x01);
    };
    let is_name = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80;
    // where the tokenizer path reads any word as a name (after a dot, FROM, JOIN, INTO)
    let mut name_expected = false;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        let was_name_expected = std::mem::replace(&mut name_expected, false);
        if c.is_ascii_whitespace()
            || (c == b'-' && next == Some(b'-'))
            || (c == b'/' && next == Some(b'*'))
        {
            name_expected = was_name_expected;
        }
        let closing = match c {
            b'"' if !mysql => Some(b'"'),
            b'`' => Some(b'`'),
            b'[' if family == "mssql" => Some(b']'),
            _ => None,
        };
        if let Some(close) = closing {
            // a quoted name: kept as written
            let end = b[i + 1..]
                .iter()
                .position(|&x| x == close)
                .map_or(b.len(), |p| i + 2 + p);
            mask.extend_from_slice(&b[i..end]);
            i = end;
        } else if c == b'-' && next == Some(b'-') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            mask.push(b' ');
        } else if c == b'/' && next == Some(b'*') {
            i += 2;
            while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                i += 1;
            }
            i += 2;
            mask.push(b' ');
        } else if c.is_ascii_whitespace() {
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            mask.push(b' ');
        } else if c == b'\'' || (c == b'"' && mysql) {
            // a string; '' (and \' in MySQL) inside it
            let start = i + 1;
            i += 1;
            while i < b.len() {
                let escaped = mysql && b[i] == b'\\';
                if escaped || (b[i] == c && b.get(i + 1) == Some(&c)) {
                    i += 2;
                } else if b[i] == c {
                    break;
                } else {
                    i += 1;
                }
            }
            let end = i.min(b.len());
            mask.push(c);
            value(&b[start..end], &mut mask);
            i += 1;
        } else if c == b'$'
            && !mysql
            && (i == 0 || !is_name(b[i - 1]))
            && !next.is_some_and(|n| n.is_ascii_digit())
        {
            // $tag$ ... $tag$
            let tag_end = b[i + 1..]
                .iter()
                .position(|&x| x == b'$')
                .map(|p| i + 1 + p);
            match tag_end {
                Some(t) if b[i + 1..t].iter().all(|&x| is_name(x) && x != b'$') => {
                    let tag = &b[i..=t];
                    let body = t + 1;
                    let close = b[body..]
                        .windows(tag.len())
                        .position(|w| w == tag)
                        .map(|p| body + p);
                    let end = close.unwrap_or(b.len());
                    mask.extend_from_slice(b"$$");
                    value(&b[body..end], &mut mask);
                    i = close.map_or(b.len(), |c| c + tag.len());
                }
                _ => {
                    mask.push(c);
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() && (i == 0 || !(is_name(b[i - 1]) || b[i - 1] == b'.')) {
            let start = i;
            while i < b.len()
                && (b[i].is_ascii_alphanumeric()
                    || b[i] == b'.'
                    || ((b[i] == b'+' || b[i] == b'-') && matches!(b[i - 1], b'e' | b'E')))
            {
                i += 1;
            }
            value(&b[start..i], &mut mask);
        } else if is_name(c) {
            let start = i;
            while i < b.len() && is_name(b[i]) {
                i += 1;
            }
            let word = &b[start..i];
            let boolean = word.eq_ignore_ascii_case(b"true") || word.eq_ignore_ascii_case(b"false");
            if boolean && !was_name_expected {
                value(&word.to_ascii_uppercase(), &mut mask);
            } else {
                mask.extend_from_slice(word);
            }
            name_expected = [&b"from"[..], b"join", b"into"]
                .iter()
                .any(|k| word.eq_ignore_ascii_case(k));
        } else {
            mask.push(c);
            name_expected = c == b'.';
            i += 1;
        }
    }
    Masked {
        mask: String::from_utf8_lossy(&mask).into_owned(),
        values: values.as_ref().map(Xxh3::digest),
    }
}

/// A fingerprint's id: 16 hex digits of xxh3 over the rules' version, the database family
/// and the shape (SQL's and the other grammars' alike).
pub(crate) fn fingerprint_id(family: &str, shape: &str) -> String {
    let mut keyed = Vec::with_capacity(shape.len() + 16);
    keyed.push(FINGERPRINT_VERSION);
    keyed.extend_from_slice(family.as_bytes());
    keyed.push(0);
    keyed.extend_from_slice(shape.as_bytes());
    let mut id = String::with_capacity(16);
    let _ = write!(id, "{:016x}", xxh3_64(&keyed));
    id
}

/// The fingerprint of one statement sent to `system` (`db.system.name`, e.g. "postgresql").
pub fn fingerprint(system: &str, text: &str) -> Fingerprint {
    let (family, dialect) = dialect_for(system);
    let (pieces, mode) = match tokenize_pieces(text, dialect.as_ref()) {
        Some(p) => (p, Mode::Tokenizer),
        None => (scan_pieces(text), Mode::Fallback),
    };
    let literals = pieces.literals.as_ref().map(Xxh3::digest);
    let placeholders = pieces.placeholders;
    let mut list = collapse_lists(pieces.out);
    let values_rows = collapse_values_rows(&mut list);
    drop_savepoint_names(&mut list);
    let in_list_max = list
        .windows(2)
        .filter_map(|w| match (&w[0], &w[1]) {
            (Piece::Kw(k), Piece::List(n)) if k == "IN" => Some(*n),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let shape = render(&list);
    let id = fingerprint_id(family, &shape);
    Fingerprint {
        id,
        summary: summarize(&list),
        class: classify(&list),
        shape,
        in_list_max,
        values_rows,
        literals,
        placeholders,
        mode,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(text: &str) -> String {
        fingerprint("postgresql", text).shape
    }

    #[test]
    fn keywords_are_sorted_for_binary_search() {
        let mut sorted = KEYWORDS.to_vec();
        sorted.sort();
        assert_eq!(sorted, KEYWORDS);
    }

    #[test]
    fn names_generalize_digit_runs_only() {
        assert_eq!(generalize_name("events_202401"), "events_{n}");
        assert_eq!(generalize_name("t1"), "t1");
        assert_eq!(generalize_name("tmp_3f9a8b7c6d"), "tmp_{n}");
        assert_eq!(generalize_name("address"), "address");
        assert_eq!(generalize_name("deadbeef"), "deadbeef"); // a word, not a hash
    }

    #[test]
    fn values_become_placeholders() {
        assert_eq!(
            shape("select * from t where a = 1 and b = 'x' and c = -2.5e3 and d = TRUE"),
            "SELECT * FROM t WHERE a = ? AND b = ? AND c = ? AND d = ?"
        );
        assert_eq!(shape("SELECT a - 1 FROM t"), "SELECT a - ? FROM t");
    }
}
