//! The order page, with each planted problem beside its fix.

use std::backtrace::Backtrace;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result};
use opentelemetry::Context;
use opentelemetry_sdk::trace::SdkTracer;
use serde_json::{json, Value};

use crate::db::{self, Db, Product};
use crate::telemetry::db_call;
use crate::{Config, Problem};

/// The page buffer mapped per request when `mmap` is planted.
pub const RENDER_BUFFER: usize = 3 << 20;
/// How long the pricing service takes to send the price list (a sleep: the shop has no
/// pricing service).
pub const PRICE_FETCH: Duration = Duration::from_millis(300);
/// How long the audit service takes to acknowledge a page view (a sleep, likewise).
pub const AUDIT_CALL: Duration = Duration::from_millis(3);
/// Words of description per product in the catalog document (about 80 KB in all).
const DESCRIPTION_WORDS: usize = 12;
/// Page views kept in the audit log.
const AUDIT_KEPT: usize = 1024;

pub struct Shop {
    config: Config,
    db: Arc<Db>,
    tracer: Option<SdkTracer>,
    /// The catalog as the content service delivers it.
    catalog_json: String,
    /// ...and parsed once, for the fixed shop.
    catalog: HashMap<i64, String>,
    prices: Arc<RwLock<PriceList>>,
    audit: Arc<Mutex<Vec<i64>>>,
    /// The views waiting for the audit sender (the fixed shop).
    audit_queue: Option<Mutex<std::sync::mpsc::Sender<i64>>>,
}

struct PriceList {
    cents: HashMap<i64, i64>,
    /// When the list is stale: the next multiple of the price TTL on the wall clock.
    expires: SystemTime,
}

/// "This discount rule does not apply", made an error that captures a backtrace: what
/// `new Exception()` costs a JVM in `fillInStackTrace`, paid for an expected outcome.
#[derive(Debug)]
pub struct NotApplicable {
    pub rule: i64,
    pub product: i64,
    pub backtrace: Backtrace,
}

impl std::fmt::Display for NotApplicable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "discount rule {} does not apply to product {}",
            self.rule, self.product
        )
    }
}

impl std::error::Error for NotApplicable {}

impl Shop {
    pub fn open(config: &Config, tracer: Option<SdkTracer>) -> Result<Shop> {
        let db = Arc::new(Db::create()?);
        let products = db.products()?;
        let catalog_json = catalog_document(&products);
        let catalog = parse_catalog(&catalog_json)?;
        let prices = Arc::new(RwLock::new(PriceList {
            cents: db.prices()?.into_iter().collect(),
            expires: next_expiry(config.price_ttl),
        }));
        let mut shop = Shop {
            config: config.clone(),
            db,
            tracer,
            catalog_json,
            catalog,
            prices,
            audit: Arc::new(Mutex::new(Vec::with_capacity(AUDIT_KEPT))),
            audit_queue: None,
        };
        if !config.planted(Problem::Lock) {
            shop.send_audits_in_background();
        }
        if !config.planted(Problem::Stall) {
            shop.refresh_prices_in_background();
        }
        Ok(shop)
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn tracer(&self) -> Option<&SdkTracer> {
        self.tracer.as_ref()
    }

    /// The page of one order, as HTML; None when there is no such order (it has no lines).
    pub fn order_page(&self, order: i64, cx: &Context) -> Result<Option<Vec<u8>>> {
        let lines = self.order_lines(order, cx)?;
        if lines.is_empty() {
            return Ok(None);
        }
        let descriptions = self.descriptions(lines.iter().map(|(p, _)| p.id))?;
        let backtraces = self.config.planted(Problem::Backtraces);
        let discounts: Vec<i64> = lines.iter().map(|(p, _)| discount(p, backtraces)).collect();
        let prices = self.prices_of(lines.iter().map(|(p, _)| p.id))?;
        self.record_view(order);
        let mut body = String::with_capacity(4096);
        let _ = write!(body, "<html><body><h1>Order {order}</h1><table>");
        let mut total = 0;
        for ((((product, qty), description), discount), price) in
            lines.iter().zip(&descriptions).zip(&discounts).zip(&prices)
        {
            let price = price.unwrap_or(product.price_cents);
            let cents = price * qty * (100 - discount) / 100;
            total += cents;
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td>{qty}</td><td>{discount}%</td><td>{}.{:02}</td></tr>",
                product.name,
                description,
                cents / 100,
                cents % 100
            );
        }
        let _ = write!(
            body,
            "</table><p>Total {}.{:02}</p></body></html>",
            total / 100,
            total % 100
        );
        self.render(body.as_bytes()).map(Some)
    }

    /// The order's lines with their products.
    fn order_lines(&self, order: i64, cx: &Context) -> Result<Vec<(Product, i64)>> {
        let tracer = self.tracer.as_ref();
        if !self.config.planted(Problem::NPlusOne) {
            return db_call(
                tracer,
                cx,
                "kiln_demo_shop::shop::order_lines",
                db::ORDER_WITH_PRODUCTS,
                Some(order),
                || self.db.order_with_products(order),
            );
        }
        let lines = db_call(
            tracer,
            cx,
            "kiln_demo_shop::shop::order_lines",
            db::ORDER_LINES,
            Some(order),
            || self.db.order_lines(order),
        )?;
        let mut out = Vec::with_capacity(lines.len());
        for (product, qty) in lines {
            // the N+1: one query per line, from this loop
            let p = db_call(
                tracer,
                cx,
                "kiln_demo_shop::shop::order_lines",
                db::PRODUCT,
                Some(product),
                || self.db.product(product),
            )?;
            out.push((p, qty));
        }
        Ok(out)
    }

    /// The products' descriptions from the catalog.
    fn descriptions(&self, ids: impl Iterator<Item = i64>) -> Result<Vec<String>> {
        let parsed;
        let catalog = if self.config.planted(Problem::Json) {
            parsed = parse_catalog(&self.catalog_json)?;
            &parsed
        } else {
            &self.catalog
        };
        Ok(ids
            .map(|id| {
                let d = catalog.get(&id).map_or("", String::as_str);
                d.split_whitespace().take(8).collect::<Vec<_>>().join(" ")
            })
            .collect())
    }

    /// The products' current prices from the price list: with `stall` planted, the request
    /// that finds the list expired reloads it while holding its lock, and every other request
    /// waits.
    fn prices_of(&self, ids: impl Iterator<Item = i64> + Clone) -> Result<Vec<Option<i64>>> {
        let look_up =
            |list: &PriceList| ids.clone().map(|id| list.cents.get(&id).copied()).collect();
        {
            let list = self.prices.read().unwrap_or_else(|e| e.into_inner());
            if !self.config.planted(Problem::Stall) || SystemTime::now() < list.expires {
                return Ok(look_up(&list));
            }
        }
        let mut list = self.prices.write().unwrap_or_else(|e| e.into_inner());
        if SystemTime::now() >= list.expires {
            std::thread::sleep(PRICE_FETCH);
            list.cents = self.db.prices()?.into_iter().collect();
            list.expires = next_expiry(self.config.price_ttl);
        }
        Ok(look_up(&list))
    }

    /// The fix for the stall: a thread fetches the list before it expires and swaps it in.
    fn refresh_prices_in_background(&self) {
        let (prices, ttl, db) = (
            Arc::clone(&self.prices),
            self.config.price_ttl,
            Arc::clone(&self.db),
        );
        std::thread::Builder::new()
            .name("price-refresh".into())
            .spawn(move || loop {
                std::thread::sleep(ttl / 2);
                std::thread::sleep(PRICE_FETCH);
                let Ok(fresh) = db.prices() else { continue };
                let mut list = prices.write().unwrap_or_else(|e| e.into_inner());
                list.cents = fresh.into_iter().collect();
                list.expires = next_expiry(ttl);
            })
            .expect("cannot start the price refresh thread");
    }

    /// Tells the audit service about the page view and keeps it in the audit log: with
    /// `lock` planted, the request makes the call while the log is locked; fixed, it queues
    /// the view for a sender thread and goes on.
    #[inline(never)] // named in profiles as the code that waits for the lock
    fn record_view(&self, order: i64) {
        match &self.audit_queue {
            Some(queue) => {
                let _ = queue.lock().unwrap_or_else(|e| e.into_inner()).send(order);
            }
            None => {
                let mut log = self.audit.lock().unwrap_or_else(|e| e.into_inner());
                std::thread::sleep(AUDIT_CALL);
                keep_view(&mut log, order);
            }
        }
    }

    /// The fix for the lock: one thread makes the audit calls, in the order of the views.
    fn send_audits_in_background(&mut self) {
        let (tx, rx) = std::sync::mpsc::channel::<i64>();
        let audit = Arc::clone(&self.audit);
        std::thread::Builder::new()
            .name("audit-sender".into())
            .spawn(move || {
                for order in rx {
                    std::thread::sleep(AUDIT_CALL);
                    keep_view(&mut audit.lock().unwrap_or_else(|e| e.into_inner()), order);
                }
            })
            .expect("cannot start the audit sender");
        self.audit_queue = Some(Mutex::new(tx));
    }

    /// The page rendered into its buffer: with `mmap` planted, a fresh mapping cleared
    /// before use (every page of it a fault); fixed, this thread's buffer again.
    #[inline(never)] // named in profiles as the code that faults
    fn render(&self, page: &[u8]) -> Result<Vec<u8>> {
        thread_local! {
            static BUFFER: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(RENDER_BUFFER));
        }
        if self.config.planted(Problem::Mmap) {
            let mut buffer =
                memmap2::MmapMut::map_anon(RENDER_BUFFER).context("cannot map the page buffer")?;
            buffer.fill(b' ');
            (&mut buffer[..]).write_all(page)?;
            return Ok(buffer[..page.len()].to_vec());
        }
        BUFFER.with(|b| {
            let mut buffer = b.borrow_mut();
            buffer.clear();
            buffer.extend_from_slice(page);
            Ok(buffer.clone())
        })
    }
}

/// Keeps a view in the audit log (the last `AUDIT_KEPT`).
fn keep_view(log: &mut Vec<i64>, order: i64) {
    if log.len() == AUDIT_KEPT {
        log.clear();
    }
    log.push(order);
}

/// The discount engine's rules, tried in turn for every order line.
const DISCOUNT_RULES: i64 = 8;

/// The first discount rule that applies to the product, in percent (0 for none). With
/// `backtraces` planted, each rule that does not apply says so with an error, backtrace and
/// all: several per line, on every page.
fn discount(product: &Product, backtraces: bool) -> i64 {
    for rule in 0..DISCOUNT_RULES {
        let applied = if backtraces {
            rule_or_error(rule, product).ok()
        } else {
            applies(rule, product)
        };
        if let Some(pct) = applied {
            return pct;
        }
    }
    0
}

/// Rule `rule` gives the product's discount when the product is in its group.
fn applies(rule: i64, product: &Product) -> Option<i64> {
    product
        .discount_pct
        .filter(|_| product.id % DISCOUNT_RULES == rule)
}

fn rule_or_error(rule: i64, product: &Product) -> Result<i64, NotApplicable> {
    applies(rule, product).ok_or_else(|| NotApplicable {
        rule,
        product: product.id,
        backtrace: Backtrace::force_capture(),
    })
}

/// The catalog as a content service would deliver it: every product with a description,
/// tags and images.
fn catalog_document(products: &[Product]) -> String {
    const WORDS: [&str; 8] = [
        "sturdy", "light", "blue", "oak", "steel", "compact", "classic", "new",
    ];
    let items: Vec<Value> = products
        .iter()
        .map(|p| {
            let description: Vec<&str> = (0..DESCRIPTION_WORDS)
                .map(|i| WORDS[(p.id as usize * 7 + i * 3) % WORDS.len()])
                .collect();
            json!({
                "id": p.id,
                "name": p.name,
                "description": description.join(" "),
                "tags": [WORDS[p.id as usize % 8], WORDS[(p.id as usize / 8) % 8]],
                "images": [format!("/img/{}/front.jpg", p.id), format!("/img/{}/side.jpg", p.id)],
            })
        })
        .collect();
    json!({ "version": 1, "products": items }).to_string()
}

/// Product id to description, from the catalog document.
fn parse_catalog(document: &str) -> Result<HashMap<i64, String>> {
    let catalog: Value = serde_json::from_str(document).context("the catalog is not JSON")?;
    Ok(catalog["products"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["id"].as_i64()?, p["description"].as_str()?.to_string())))
        .collect())
}

/// The next multiple of `ttl` on the wall clock (a cache expiring "on the minute").
fn next_expiry(ttl: Duration) -> SystemTime {
    let ttl_ms = ttl.as_millis().max(1) as u64;
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    UNIX_EPOCH + Duration::from_millis((now_ms / ttl_ms + 1) * ttl_ms)
}
