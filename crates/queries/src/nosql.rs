//! Statements that are not SQL, normalised by their own grammar: MongoDB commands (JSON, as
//! the Java and Node OpenTelemetry instrumentations write them, or `find {'user_id': 42}`, as
//! PyMongo's writes them), Elasticsearch and OpenSearch bodies, and Redis commands. Keys,
//! operators and the command are the shape; values are values.
//!
//! Read with SQL's rules, a double-quoted string was a quoted name: the `"?"` the Mongo
//! instrumentations put for a value, and real values alike, made every repeat of one query
//! look like "the same statement with the same values" (an N+1 reported as redundant).
//!
//! Written by hand: what is needed is a scanner that tells keys from values in JSON, in a
//! Python dict's repr and in a truncated statement, which no JSON parser does.

use std::fmt::Write as _;

use xxhash_rust::xxh3::Xxh3;

use crate::sql::{Fingerprint, Mode, StatementClass};

/// How a database's statements are read when they are not SQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grammar {
    /// JSON documents (MongoDB commands and filters, search bodies).
    Document,
    /// A command word and its arguments, one command a line (Redis).
    Command,
}

/// The grammar of `system`'s statements (`db.system.name`), or None for SQL.
pub fn grammar(system: &str) -> Option<Grammar> {
    match system.to_ascii_lowercase().as_str() {
        "mongodb" | "elasticsearch" | "opensearch" | "couchdb" | "cosmosdb" | "azure.cosmosdb" => {
            Some(Grammar::Document)
        }
        "redis" | "valkey" | "memcached" => Some(Grammar::Command),
        _ => None,
    }
}

/// The fingerprint of a statement in `grammar`, and the hash of its values (None when it
/// carried none). `collection` (`db.collection.name`) joins the shape when the text does not
/// name it: PyMongo's `find {'user_id': ?}` is the same text for every collection.
pub fn fingerprint(
    grammar: Grammar,
    system: &str,
    text: &str,
    collection: Option<&str>,
) -> (Fingerprint, Option<u64>) {
    let scanned = match grammar {
        Grammar::Document => scan_document(text, system.eq_ignore_ascii_case("mongodb")),
        Grammar::Command => scan_commands(text),
    };
    let command = scanned.command.clone().unwrap_or_default();
    let mut shape = scanned.shape;
    if let Some(c) = collection.filter(|c| !c.is_empty() && !shape.contains(*c)) {
        shape = match shape.split_once(' ') {
            Some((word, rest)) if !word.starts_with(['{', '[']) => format!("{word} {c} {rest}"),
            _ if shape.starts_with(['{', '[']) => format!("{c} {shape}"),
            _ => format!("{shape} {c}"),
        };
    }
    let id = crate::sql::fingerprint_id(&system.to_ascii_lowercase(), &shape);
    let summary = match (
        command.is_empty(),
        collection.or(scanned.collection.as_deref()),
    ) {
        (false, Some(c)) => format!("{command} {c}"),
        (false, None) => command.clone(),
        (true, Some(c)) => c.to_string(),
        (true, None) => String::new(),
    };
    // some values scrubbed to "?": the ones left do not tell the calls apart
    let literals = match scanned.placeholders {
        true => None,
        false => scanned.literals.as_ref().map(Xxh3::digest),
    };
    (
        Fingerprint {
            id,
            shape,
            summary,
            class: match grammar {
                Grammar::Document => document_class(&command),
                Grammar::Command => command_class(&command),
            },
            in_list_max: scanned.in_list_max,
            values_rows: scanned.values_rows,
            literals,
            placeholders: scanned.placeholders,
            mode: match grammar {
                Grammar::Document => Mode::Document,
                Grammar::Command => Mode::Command,
            },
        },
        literals,
    )
}

#[derive(Default)]
struct Scanned {
    shape: String,
    /// The command: the leading word (`find {...}`) or the document's first key.
    command: Option<String>,
    /// The collection the command document names (`{"find": "orders"}`).
    collection: Option<String>,
    literals: Option<Xxh3>,
    placeholders: bool,
    in_list_max: u32,
    values_rows: u32,
}

impl Scanned {
    /// A value: `?` in the shape; a `?` the instrumentation wrote means the value was not
    /// recorded, any other is hashed.
    fn value(&mut self, raw: &str) {
        if raw == "?" {
            self.placeholders = true;
        } else {
            let hasher = self.literals.get_or_insert_with(Xxh3::new);
            hasher.update(raw.as_bytes());
            hasher.update(&[0]);
        }
        self.shape.push('?');
    }
}

/// An open `{` or `[` and, for an array, where each element's shape starts and ends.
struct Open {
    array: bool,
    at: usize,
    elements: Vec<(usize, usize)>,
    element_start: usize,
    /// Every element so far is one scalar value.
    scalars: bool,
}

/// Reads a quoted string starting at `chars[i]` (the quote); returns its text and the index
/// after it. An unterminated string (a truncated statement) runs to the end.
fn quoted(chars: &[char], i: usize) -> (String, usize) {
    let quote = chars[i];
    let mut text = String::new();
    let mut j = i + 1;
    while j < chars.len() && chars[j] != quote {
        if chars[j] == '\\' && j + 1 < chars.len() {
            j += 1;
        }
        text.push(chars[j]);
        j += 1;
    }
    (text, (j + 1).min(chars.len()))
}

/// The next character after `i` that is not white space.
fn next_significant(chars: &[char], i: usize) -> Option<char> {
    chars[i..].iter().copied().find(|c| !c.is_whitespace())
}

fn scan_document(text: &str, mongo: bool) -> Scanned {
    let chars: Vec<char> = text.chars().collect();
    let mut s = Scanned::default();
    let mut open: Vec<Open> = Vec::new();
    // the command document's first key names the command and its value the collection
    let mut first_key_pending = mongo && text.trim_start().starts_with('{');
    let mut keep_next_value: Option<Kept> = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let depth = open.len();
        match c {
            '{' | '[' => {
                s.shape.push(c);
                if let Some(o) = open.last_mut() {
                    o.scalars = false;
                }
                open.push(Open {
                    array: c == '[',
                    at: s.shape.len() - 1,
                    elements: Vec::new(),
                    element_start: s.shape.len(),
                    scalars: true,
                });
                i += 1;
            }
            '}' | ']' => {
                let closed = match open.last() {
                    Some(o) if o.array == (c == ']') => open.pop(),
                    _ => None,
                };
                if let Some(mut o) = closed {
                    if o.array && s.shape.len() > o.element_start {
                        o.elements.push((o.element_start, s.shape.len()));
                    }
                    collapse_array(&mut s, &o);
                }
                s.shape.push(c);
                i += 1;
            }
            ',' => {
                if let Some(o) = open.last_mut().filter(|o| o.array) {
                    o.elements.push((o.element_start, s.shape.len()));
                    o.element_start = s.shape.len() + 2;
                }
                s.shape.push_str(", ");
                i += 1;
            }
            ':' => {
                s.shape.push_str(": ");
                i += 1;
            }
            '"' | '\'' => {
                let (string, next) = quoted(&chars, i);
                i = next;
                if next_significant(&chars, i) == Some(':') {
                    key(
                        &mut s,
                        &string,
                        depth,
                        &mut first_key_pending,
                        &mut keep_next_value,
                    );
                } else if let Some(kept) =
                    std::mem::take(&mut keep_next_value).filter(|_| string != "?")
                {
                    if kept == Kept::Collection {
                        s.collection = Some(string.clone());
                    }
                    let _ = write!(s.shape, "{string:?}");
                } else {
                    s.value(&string);
                }
            }
            c if c.is_ascii_digit()
                || (c == '-' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) =>
            {
                let start = i;
                i += 1;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || matches!(chars[i], '.' | '+' | '-'))
                {
                    i += 1;
                }
                let raw: String = chars[start..i].iter().collect();
                keep_next_value = None;
                s.value(&raw);
            }
            c if c.is_alphabetic() || c == '_' || c == '$' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_alphanumeric() || matches!(chars[i], '_' | '$' | '.'))
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                if next_significant(&chars, i) == Some(':') {
                    key(
                        &mut s,
                        &word,
                        depth,
                        &mut first_key_pending,
                        &mut keep_next_value,
                    );
                } else if matches!(
                    word.as_str(),
                    "true" | "false" | "null" | "True" | "False" | "None" | "undefined"
                ) {
                    keep_next_value = None;
                    s.value(&word);
                } else {
                    // a command (`find {...}`) or a constructor (`ObjectId('...')`)
                    if depth == 0 && s.command.is_none() {
                        s.command = Some(word.clone());
                        first_key_pending = false;
                    }
                    if !s.shape.is_empty() && !s.shape.ends_with(['{', '[', '(', ' ']) {
                        s.shape.push(' ');
                    }
                    s.shape.push_str(&word);
                    if depth == 0 {
                        s.shape.push(' ');
                    }
                }
            }
            c => {
                s.shape.push(c);
                i += 1;
            }
        }
    }
    s.shape = s.shape.trim().to_string();
    // the command alone (PyMongo's statement unless told to capture it): its values were
    // not recorded, so no two calls can be said to carry the same ones
    if !text.contains(['{', '[']) {
        s.placeholders = true;
    }
    s
}

/// A string value that is a name, kept in the shape: the collection the command document
/// names, or its database (`$db`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kept {
    Collection,
    Database,
}

/// A key: kept in the shape, unquoted; the command document's first key is the command.
fn key(
    s: &mut Scanned,
    name: &str,
    depth: usize,
    first_key_pending: &mut bool,
    keep_next_value: &mut Option<Kept>,
) {
    if *first_key_pending && depth == 1 {
        *first_key_pending = false;
        s.command = Some(name.to_string());
        *keep_next_value = Some(Kept::Collection);
    } else if name == "$db" && depth == 1 {
        *keep_next_value = Some(Kept::Database);
    }
    s.shape.push_str(name);
}

/// An array whose elements all have one shape becomes one element: a list of values
/// (`$in: [1, 2, 3]`, batched access) or of documents (an insert of many).
fn collapse_array(s: &mut Scanned, o: &Open) {
    let Some(&(first_start, first_end)) = o.elements.first() else {
        return;
    };
    let first = s.shape[first_start..first_end].to_string();
    if o.elements.len() < 2
        || !o
            .elements
            .iter()
            .all(|&(a, b)| s.shape.get(a..b) == Some(first.as_str()))
    {
        return;
    }
    let n = o.elements.len() as u32;
    if o.scalars {
        s.in_list_max = s.in_list_max.max(n);
    } else {
        s.values_rows = s.values_rows.max(n);
    }
    s.shape.truncate(o.at + 1);
    s.shape.push_str(&first);
}

/// Redis commands whose arguments are many keys (or members): their count is a batch.
const VARIADIC: &[&str] = &[
    "DEL", "EXISTS", "HDEL", "HMGET", "LPUSH", "MGET", "MSET", "RPUSH", "SADD", "SREM", "TOUCH",
    "UNLINK", "ZADD", "ZREM",
];

/// One Redis command a line (a pipeline is several): the command word, its arguments as
/// values.
fn scan_commands(text: &str) -> Scanned {
    let mut s = Scanned::default();
    let mut shapes = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut words = line.split_whitespace();
        let Some(command) = words.next() else {
            continue;
        };
        let command = command.to_ascii_uppercase();
        s.command.get_or_insert_with(|| command.clone());
        let mut line_shape = command.clone();
        let args: Vec<&str> = words.collect();
        let start = s.shape.len();
        for arg in &args {
            s.value(arg);
        }
        s.shape.truncate(start);
        if VARIADIC.contains(&command.as_str()) && !args.is_empty() {
            s.in_list_max = s.in_list_max.max(args.len() as u32);
            line_shape.push_str(" ?...");
        } else {
            for _ in &args {
                line_shape.push_str(" ?");
            }
        }
        shapes.push(line_shape);
    }
    s.shape = shapes.join("; ");
    s
}

/// How to get the values recorded, in the database's instrumentations' own terms; None for
/// SQL (`db.query.parameter.*`).
pub fn record_values_hint(mode: Mode) -> Option<&'static str> {
    match mode {
        Mode::Document => Some(
            "where the instrumentation can: PyMongo's capture_statement=True, the Node \
             instrumentation's enhancedDatabaseReporting, the Java agent's \
             otel.instrumentation.mongo.statement-sanitizer.enabled=false",
        ),
        // redis-py's instrumentation writes every argument as "?" and has no switch
        Mode::Command => Some(
            "where the instrumentation can: the Java agent's \
             otel.instrumentation.common.db-statement-sanitizer.enabled=false, ioredis' \
             dbStatementSerializer; redis-py's instrumentation always writes them as ?",
        ),
        Mode::Tokenizer | Mode::Fallback => None,
    }
}

/// What to do about one statement run in a loop, in the database's own terms; None for SQL.
pub fn loop_fix(mode: Mode, write: bool) -> Option<&'static str> {
    match (mode, write) {
        (Mode::Document, false) => Some(
            "load them in one query before the loop: a find with {field: {$in: [...]}}, or $lookup \
             in an aggregation (an ODM's populate/prefetch does the same)",
        ),
        (Mode::Document, true) => {
            Some("send them in one command: insertMany, or bulkWrite for updates and deletes")
        }
        (Mode::Command, _) => {
            Some("send them in one round trip: MGET/MSET/HMGET, or a pipeline of the commands")
        }
        _ => None,
    }
}

fn document_class(command: &str) -> StatementClass {
    match command.to_ascii_lowercase().as_str() {
        "find"
        | "findone"
        | "aggregate"
        | "count"
        | "countdocuments"
        | "distinct"
        | "getmore"
        | "search"
        | "msearch"
        | "get"
        | "mget"
        | "exists"
        | "estimateddocumentcount" => StatementClass::Read,
        "insert" | "insertone" | "insertmany" | "update" | "updateone" | "updatemany"
        | "delete" | "deleteone" | "deletemany" | "findandmodify" | "findoneandupdate"
        | "findoneanddelete" | "findoneandreplace" | "replaceone" | "bulkwrite" | "index"
        | "bulk" => StatementClass::Write,
        "createindexes" | "dropindexes" | "create" | "drop" | "dropdatabase" => StatementClass::Ddl,
        "hello" | "ismaster" | "ping" | "endsessions" | "saslstart" | "saslcontinue"
        | "buildinfo" | "killcursors" | "committransaction" | "aborttransaction" => {
            StatementClass::Housekeeping
        }
        _ => StatementClass::Other,
    }
}

fn command_class(command: &str) -> StatementClass {
    match command {
        "GET" | "MGET" | "HGET" | "HGETALL" | "HMGET" | "EXISTS" | "SMEMBERS" | "SISMEMBER"
        | "LRANGE" | "LINDEX" | "LLEN" | "ZRANGE" | "ZRANGEBYSCORE" | "ZREVRANGE" | "ZSCORE"
        | "ZCARD" | "ZRANK" | "SCARD" | "TTL" | "PTTL" | "KEYS" | "SCAN" | "STRLEN" | "TYPE"
        | "HEXISTS" | "HKEYS" | "HVALS" | "HLEN" | "GETRANGE" => StatementClass::Read,
        "SET" | "SETEX" | "SETNX" | "PSETEX" | "MSET" | "DEL" | "UNLINK" | "HSET" | "HMSET"
        | "HDEL" | "HINCRBY" | "INCR" | "INCRBY" | "DECR" | "DECRBY" | "EXPIRE" | "PEXPIRE"
        | "LPUSH" | "RPUSH" | "LPOP" | "RPOP" | "SADD" | "SREM" | "ZADD" | "ZREM" | "ZINCRBY"
        | "GETSET" | "GETDEL" | "APPEND" | "PUBLISH" | "XADD" => StatementClass::Write,
        "PING" | "AUTH" | "SELECT" | "CLIENT" | "HELLO" | "INFO" | "QUIT" | "MULTI" | "EXEC"
        | "DISCARD" | "WATCH" | "UNWATCH" => StatementClass::Housekeeping,
        _ => StatementClass::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mongo(text: &str) -> (Fingerprint, Option<u64>) {
        fingerprint(Grammar::Document, "mongodb", text, None)
    }

    /// The Java and Node instrumentations' JSON, values scrubbed to "?": the collection is
    /// the shape, the values are not recorded (so no "same values" claim can be made).
    #[test]
    fn a_scrubbed_command_document_keeps_its_collection_and_records_no_values() {
        let (fp, literals) = mongo(
            r#"{"find": "orders", "filter": {"user_id": "?", "status": {"$in": ["?", "?", "?"]}}, "$db": "shop"}"#,
        );
        assert_eq!(
            fp.shape,
            r#"{find: "orders", filter: {user_id: ?, status: {$in: [?]}}, $db: "shop"}"#
        );
        assert_eq!(fp.summary, "find orders");
        assert_eq!(fp.class, StatementClass::Read);
        assert!(fp.placeholders);
        assert_eq!(literals, None);
        assert_eq!(fp.in_list_max, 3);
    }

    /// Real values: the same shape, and a hash that tells values apart.
    #[test]
    fn real_values_are_values_whatever_their_quotes() {
        let a = mongo(r#"{"find": "orders", "filter": {"user_id": 1}}"#);
        let b = mongo(r#"{"find": "orders", "filter": {"user_id": 2}}"#);
        let c = mongo(r#"{"find":"orders","filter":{"user_id":2}}"#);
        assert_eq!(a.0.id, b.0.id);
        assert_ne!(a.1, b.1);
        assert_eq!(b, c);
        let named = mongo(r#"{"find": "orders", "filter": {"name": "ann"}}"#);
        let other = mongo(r#"{"find": "orders", "filter": {"name": "bob"}}"#);
        assert_eq!(named.0.id, other.0.id);
        assert_ne!(named.1, other.1);
        assert!(!named.0.placeholders);
        // another collection is another statement
        let users = mongo(r#"{"find": "users", "filter": {"user_id": 1}}"#);
        assert_ne!(users.0.id, a.0.id);
    }

    /// PyMongo's instrumentation writes the command and a Python dict's repr; the collection
    /// comes from db.collection.name.
    #[test]
    fn pymongo_statements_read_with_the_collection_beside_them() {
        let f = |text, coll| fingerprint(Grammar::Document, "mongodb", text, Some(coll));
        let (a, va) = f("find {'user_id': 42, 'deleted': False}", "orders");
        let (b, vb) = f("find {'user_id': 43, 'deleted': False}", "orders");
        assert_eq!(a.shape, "find orders {user_id: ?, deleted: ?}");
        assert_eq!(a.summary, "find orders");
        assert_eq!(a.id, b.id);
        assert_ne!(va, vb);
        let (bare, values) = f("find", "orders");
        assert_eq!((bare.shape.as_str(), values), ("find orders", None));
        // the command alone: its values were not recorded
        assert!(bare.placeholders && !a.placeholders);
        assert_ne!(f("find", "users").0.id, bare.id);
        let (oid, _) = f(
            "find {'_id': ObjectId('65a1f0c2e4b0a1b2c3d4e5f6')}",
            "orders",
        );
        assert_eq!(oid.shape, "find orders {_id: ObjectId(?)}");
    }

    /// An insert of many documents is one batch, whatever their number.
    #[test]
    fn arrays_of_one_shape_collapse_and_count_as_a_batch() {
        let two = mongo(r#"{"insert": "items", "documents": [{"a": 1}, {"a": 2}]}"#).0;
        let three = mongo(r#"{"insert": "items", "documents": [{"a": 1}, {"a": 2}, {"a": 3}]}"#).0;
        assert_eq!(two.id, three.id);
        assert_eq!(three.values_rows, 3);
        assert_eq!(three.class, StatementClass::Write);
        let mixed = mongo(r#"{"insert": "items", "documents": [{"a": 1}, {"b": 2}]}"#).0;
        assert_ne!(mixed.id, two.id);
    }

    #[test]
    fn redis_commands_keep_the_command_and_count_keys() {
        let redis = |t| fingerprint(Grammar::Command, "redis", t, None);
        let (a, va) = redis("GET user:1");
        let (b, vb) = redis("get user:2");
        assert_eq!((a.shape.as_str(), a.id == b.id), ("GET ?", true));
        assert_ne!(va, vb);
        assert_eq!(a.class, StatementClass::Read);
        let (m, _) = redis("MGET a b c");
        assert_eq!((m.shape.as_str(), m.in_list_max), ("MGET ?...", 3));
        let (scrubbed, v) = redis("SET ? ?");
        assert!(scrubbed.placeholders && v.is_none());
        assert_eq!(redis("SET ? ?\nGET ?").0.shape, "SET ? ?; GET ?");
    }

    #[test]
    fn systems_pick_their_grammar() {
        assert_eq!(grammar("mongodb"), Some(Grammar::Document));
        assert_eq!(grammar("Redis"), Some(Grammar::Command));
        assert_eq!(grammar("postgresql"), None);
    }

    proptest! {
        #[test]
        fn any_text_normalises_without_panic(text in "\\PC{0,200}") {
            let _ = fingerprint(Grammar::Document, "mongodb", &text, Some("c"));
            let _ = fingerprint(Grammar::Command, "redis", &text, None);
        }

        /// Values never reach the shape: the same document with other numbers and strings
        /// has the same fingerprint.
        #[test]
        fn values_never_change_the_shape(n in any::<i64>(), s in "[a-zA-Z0-9 ]{0,12}") {
            let a = mongo(&format!(r#"{{"find": "t", "filter": {{"k": {n}, "s": "{s}"}}}}"#)).0;
            let b = mongo(r#"{"find": "t", "filter": {"k": 0, "s": ""}}"#).0;
            prop_assert_eq!(a.id, b.id);
        }
    }
}
