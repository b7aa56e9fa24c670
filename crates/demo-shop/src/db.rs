//! The shop's database: SQLite in a file of its own, one connection per handler thread (SQLite
//! connections are not shared between threads), filled at start with a deterministic catalog.

use std::cell::RefCell;
use std::path::PathBuf;

use anyhow::{Context, Result};
use rusqlite::{params, Connection, OpenFlags};

pub const PRODUCTS: i64 = 500;
pub const ORDERS: i64 = 1000;
/// Lines per order: the N of the N+1.
pub const LINES_PER_ORDER: i64 = 8;

pub const ORDER_LINES: &str = "SELECT product_id, qty FROM order_lines WHERE order_id = ?1";
pub const PRODUCT: &str = "SELECT name, price_cents, discount_pct FROM products WHERE id = ?1";
pub const ORDER_WITH_PRODUCTS: &str = "SELECT p.id, p.name, p.price_cents, p.discount_pct, l.qty \
     FROM order_lines l JOIN products p ON p.id = l.product_id WHERE l.order_id = ?1";
pub const PRICES: &str = "SELECT id, price_cents FROM products";

#[derive(Clone, Debug)]
pub struct Product {
    pub id: i64,
    pub name: String,
    pub price_cents: i64,
    pub discount_pct: Option<i64>,
}

pub struct Db {
    path: PathBuf,
}

thread_local! {
    /// This thread's connection and the database file it is open on.
    static CONNECTION: RefCell<Option<(PathBuf, Connection)>> = const { RefCell::new(None) };
}

/// The database file of the shop running as `pid` (with its `-wal` and `-shm` beside it).
fn file_name(pid: u32) -> String {
    format!("kiln-demo-shop-{pid}.db")
}

/// Removes the files of shops that are gone: a shop killed with SIGKILL (as tests and
/// supervisors stop it) never runs its `Drop`, and each left 250 KB in the temporary
/// directory. A file is left while a process of its pid lives (another shop, or a pid reused).
fn remove_left_behind(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("kiln-demo-shop-"))
            .and_then(|n| n.split_once(".db"))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

impl Db {
    /// Creates the database file in the temporary directory and fills it (after removing
    /// those that shops killed earlier left behind).
    pub fn create() -> Result<Db> {
        let dir = std::env::temp_dir();
        remove_left_behind(&dir);
        let path = dir.join(file_name(std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut conn = Connection::open(&path)
            .with_context(|| format!("cannot create the database {}", path.display()))?;
        fill(&mut conn).context("cannot fill the shop's database")?;
        Ok(Db { path })
    }

    /// Runs `f` on this thread's connection, opening it on first use.
    pub fn with<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        CONNECTION.with(|slot| {
            let mut slot = slot.borrow_mut();
            if slot.as_ref().is_none_or(|(p, _)| p != &self.path) {
                let conn = Connection::open_with_flags(
                    &self.path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )
                .with_context(|| format!("cannot open {}", self.path.display()))?;
                *slot = Some((self.path.clone(), conn));
            }
            let (_, conn) = slot.as_ref().expect("opened above");
            f(conn).context("database call failed")
        })
    }

    pub fn order_lines(&self, order: i64) -> Result<Vec<(i64, i64)>> {
        self.with(|c| {
            c.prepare_cached(ORDER_LINES)?
                .query_map([order], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
    }

    pub fn product(&self, id: i64) -> Result<Product> {
        self.with(|c| {
            c.prepare_cached(PRODUCT)?.query_row([id], |r| {
                Ok(Product {
                    id,
                    name: r.get(0)?,
                    price_cents: r.get(1)?,
                    discount_pct: r.get(2)?,
                })
            })
        })
    }

    pub fn order_with_products(&self, order: i64) -> Result<Vec<(Product, i64)>> {
        self.with(|c| {
            c.prepare_cached(ORDER_WITH_PRODUCTS)?
                .query_map([order], |r| {
                    Ok((
                        Product {
                            id: r.get(0)?,
                            name: r.get(1)?,
                            price_cents: r.get(2)?,
                            discount_pct: r.get(3)?,
                        },
                        r.get(4)?,
                    ))
                })?
                .collect()
        })
    }

    pub fn prices(&self) -> Result<Vec<(i64, i64)>> {
        self.with(|c| {
            c.prepare_cached(PRICES)?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
    }

    pub fn products(&self) -> Result<Vec<Product>> {
        (1..=PRODUCTS).map(|id| self.product(id)).collect()
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut p = self.path.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}

fn fill(conn: &mut Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL,
             price_cents INTEGER NOT NULL, discount_pct INTEGER);
         CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL);
         CREATE TABLE order_lines (order_id INTEGER NOT NULL, product_id INTEGER NOT NULL,
             qty INTEGER NOT NULL);
         CREATE INDEX order_lines_order ON order_lines (order_id);",
    )?;
    let tx = conn.transaction()?;
    for id in 1..=PRODUCTS {
        // one product in ten is discounted
        let discount = (id % 10 == 0).then_some(5 + id % 20);
        tx.execute(
            "INSERT INTO products VALUES (?1, ?2, ?3, ?4)",
            params![
                id,
                format!("product {id}"),
                100 + (id * 37) % 9900,
                discount
            ],
        )?;
    }
    for order in 1..=ORDERS {
        tx.execute(
            "INSERT INTO orders VALUES (?1, ?2)",
            params![order, format!("customer {}", order % 97)],
        )?;
        for line in 0..LINES_PER_ORDER {
            let product = 1 + (order * 31 + line * 7) % PRODUCTS;
            tx.execute(
                "INSERT INTO order_lines VALUES (?1, ?2, ?3)",
                params![order, product, 1 + line % 3],
            )?;
        }
    }
    tx.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_of_shops_that_are_gone_are_removed_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        // above the kernel's largest pid (4194304): no process has it
        let gone = dir.path().join(file_name(4_194_999));
        let gone_wal = dir.path().join(format!("{}-wal", file_name(4_194_999)));
        let mine = dir.path().join(file_name(std::process::id()));
        let other = dir.path().join("kiln-demo-shop-notes.txt");
        for f in [&gone, &gone_wal, &mine, &other] {
            std::fs::write(f, b"x").unwrap();
        }
        remove_left_behind(dir.path());
        assert!(!gone.exists() && !gone_wal.exists());
        assert!(mine.exists() && other.exists());
    }
}
