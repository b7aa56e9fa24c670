//! Call stacks as SDKs write them into `code.stacktrace` (Java's `at pkg.Cls.m(F.java:13)`,
//! Python's `File "x.py", line 12, in fn`, Go's `pkg.fn(...)` + `\t/path/f.go:42 +0x1d`,
//! Node's `at fn (file.js:1:2)`), parsed into frames root first, each marked as the
//! application's own code or a library's (runtime, framework, driver, instrumentation).

pub use kiln_record::schema::queries::Frame;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Language {
    Java,
    Python,
    Go,
    Node,
    DotNet,
    Other,
}

impl Language {
    /// From `telemetry.sdk.language`.
    pub fn from_sdk(name: &str) -> Self {
        match name.to_ascii_lowercase().as_str() {
            "java" | "kotlin" | "scala" | "jvm" => Self::Java,
            "python" => Self::Python,
            "go" => Self::Go,
            "nodejs" | "node" | "javascript" | "typescript" | "webjs" => Self::Node,
            "dotnet" | "csharp" | "c#" | ".net" => Self::DotNet,
            _ => Self::Other,
        }
    }

    /// From the text itself, when the resource does not say.
    fn sniff(text: &str) -> Self {
        if text.contains("File \"") && text.contains(", line ") {
            Self::Python
        } else if text.contains(":line ") || (text.contains(" in ") && text.contains(".cs")) {
            Self::DotNet
        } else if text.contains(".go:") && text.contains('\t') {
            Self::Go
        } else if text.contains(".java:")
            || text.contains("(Native Method)")
            || text.contains("(Unknown Source)")
        {
            Self::Java
        } else if text.contains(".js:")
            || text.contains(".ts:")
            || text.contains(".mjs:")
            || text.contains("node:")
        {
            Self::Node
        } else {
            Self::Other
        }
    }
}

/// Frames root first. Lines that are no frame (headers, `... 13 more`, source lines) are
/// skipped; a stack with no parseable frame gives an empty list.
pub fn parse(text: &str, language: Option<Language>) -> Vec<Frame> {
    let language = match language {
        Some(Language::Other) | None => Language::sniff(text),
        Some(l) => l,
    };
    let mut frames = match language {
        Language::Python => parse_python(text),
        Language::Go => parse_go(text),
        Language::DotNet => parse_dotnet(text),
        _ => parse_at_lines(text, language),
    };
    // Python writes the root first; the others write the leaf first.
    if language != Language::Python {
        frames.reverse();
    }
    frames
}

fn parse_python(text: &str) -> Vec<Frame> {
    let mut frames = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix("File \"") else {
            continue;
        };
        let Some((file, rest)) = rest.split_once('"') else {
            continue;
        };
        let line_no = rest
            .split_once(", line ")
            .and_then(|(_, r)| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok());
        let function = rest
            .split_once(", in ")
            .map(|(_, f)| f.trim())
            .unwrap_or("<module>");
        frames.push(Frame {
            app: python_app(file),
            function: function.to_string(),
            file: Some(file.to_string()),
            line: line_no,
        });
    }
    frames
}

/// Python: by where the file is, never by its package's name (an application's own
/// `opentelemetry/` or `sqlalchemy_utils/` folder is still the application's).
fn python_app(file: &str) -> bool {
    !(file.contains("site-packages")
        || file.contains("dist-packages")
        || file.starts_with('<')
        || file.contains("/lib/python")
        || file.contains("\\lib\\python")
        || entry_point(file))
}

/// A launcher, not the application: a console script or entry point in a `bin` folder (a
/// venv's `bin/gunicorn`, `/usr/local/bin/celery`, Windows' `Scripts\uwsgi.exe`,
/// `node_modules/.bin/ts-node`). It is the root of every stack and no line of it is the
/// user's to fix.
fn entry_point(file: &str) -> bool {
    let parent = file.rsplit(['/', '\\']).nth(1).unwrap_or_default();
    matches!(parent, "bin" | "sbin" | ".bin" | "Scripts")
}

fn parse_go(text: &str) -> Vec<Frame> {
    let mut frames = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with("goroutine ") || line.starts_with('\t') {
            continue;
        }
        let function = match line.rfind('(') {
            Some(i) if line.ends_with(')') => &line[..i],
            _ => line,
        };
        let function = function.strip_prefix("created by ").unwrap_or(function);
        let (file, line_no) = match lines.peek() {
            Some(next) if next.starts_with('\t') => {
                let loc = next.trim();
                let loc = loc.split(" +0x").next().unwrap_or(loc);
                lines.next();
                match loc.rsplit_once(':') {
                    Some((f, n)) => (Some(f.to_string()), n.parse().ok()),
                    None => (Some(loc.to_string()), None),
                }
            }
            _ => (None, None),
        };
        frames.push(Frame {
            app: go_app(function, file.as_deref()),
            function: function.to_string(),
            file,
            line: line_no,
        });
    }
    frames
}

fn go_app(function: &str, file: Option<&str>) -> bool {
    const LIBRARY: &[&str] = &[
        "runtime.",
        "net/http.",
        "net.",
        "database/sql",
        "sync.",
        "internal/",
        "go.opentelemetry.io/",
        "github.com/XSAM/otelsql",
        "github.com/lib/pq",
        "github.com/jackc/",
        "github.com/go-sql-driver/",
        "gorm.io/",
    ];
    !(LIBRARY.iter().any(|p| function.starts_with(p))
        || file.is_some_and(|f| f.contains("/pkg/mod/") || f.contains("/go/src/")))
}

/// .NET's `at Ns.Cls.Method(Int32 id) in /src/File.cs:line 42` (location when built with
/// symbols).
fn parse_dotnet(text: &str) -> Vec<Frame> {
    let mut frames = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("at ") else {
            continue;
        };
        let (call, location) = match rest.rsplit_once(" in ") {
            Some((call, location)) => (call, Some(location)),
            None => (rest, None),
        };
        let function = call.split('(').next().unwrap_or(call).trim();
        let (file, line_no) = match location.and_then(|l| l.rsplit_once(":line ")) {
            Some((file, n)) => (Some(file.to_string()), n.trim().parse().ok()),
            None => (location.map(str::to_string), None),
        };
        frames.push(Frame {
            app: dotnet_app(function),
            function: function.to_string(),
            file,
            line: line_no,
        });
    }
    frames
}

/// Java's and Node's `at ...` lines.
fn parse_at_lines(text: &str, language: Language) -> Vec<Frame> {
    let mut frames = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("at ") else {
            continue;
        };
        let rest = rest.strip_prefix("async ").unwrap_or(rest);
        let (function, location) = match rest.rfind('(') {
            Some(i) if rest.ends_with(')') => (rest[..i].trim(), &rest[i + 1..rest.len() - 1]),
            _ => ("<anonymous>", rest),
        };
        // java.base/java.lang.Thread.run: the module is the JDK's
        let (module, function) = match function.split_once('/') {
            Some((m, f)) if language != Language::Node && !m.contains(' ') => (Some(m), f),
            _ => (None, function),
        };
        let (file, line_no) = split_location(location);
        let node_like = language == Language::Node
            || (language != Language::Java
                && file
                    .as_deref()
                    .is_some_and(|f| f.ends_with(".js") || f.starts_with("node:")));
        let app = if node_like {
            node_app(file.as_deref().unwrap_or(""))
        } else {
            module.is_none() && java_app(function)
        };
        frames.push(Frame {
            function: function.to_string(),
            file,
            line: line_no,
            app,
        });
    }
    frames
}

/// `File.java:13`, `/app/x.js:1:2`, `Native Method` -> (file, line).
fn split_location(location: &str) -> (Option<String>, Option<u32>) {
    let parts: Vec<&str> = location.rsplitn(3, ':').collect();
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match parts.as_slice() {
        [col, line, file] if numeric(col) && numeric(line) => {
            (Some(file.to_string()), line.parse().ok())
        }
        [line, rest @ ..] if numeric(line) => {
            let file = location[..location.len() - line.len() - 1].to_string();
            let _ = rest;
            (Some(file), line.parse().ok())
        }
        _ if location.is_empty() || location.contains(' ') => (None, None),
        _ => (Some(location.to_string()), None),
    }
}

/// Java packages of libraries: whole packages, never a vendor's namespace (an application
/// may live in `org.springframework.samples.…` or `com.google.mycompany.…`).
const JAVA_LIBRARIES: &[&str] = &[
    "java.",
    "javax.",
    "jakarta.",
    "jdk.",
    "sun.",
    "com.sun.",
    "io.opentelemetry.",
    "org.h2.",
    "org.sqlite.",
    "org.postgresql.",
    "com.mysql.",
    "org.mariadb.",
    "oracle.jdbc.",
    "oracle.ucp.",
    "com.microsoft.sqlserver.",
    "com.zaxxer.",
    "org.hibernate.",
    "org.apache.",
    "org.eclipse.",
    "io.netty.",
    "kotlin.",
    "kotlinx.",
    "scala.",
    "com.fasterxml.",
    "reactor.",
    "io.micrometer.",
    "org.jboss.",
    "org.glassfish.",
    "io.undertow.",
    "org.jooq.",
    "org.mybatis.",
    "io.quarkus.",
    "io.vertx.",
    "net.bytebuddy.",
    "org.aspectj.",
    "org.slf4j.",
    "ch.qos.logback.",
    "org.thymeleaf.",
    "io.grpc.",
    "com.google.common.",
    "com.google.protobuf.",
    "com.github.benmanes.caffeine.",
    "org.flywaydb.",
    "liquibase.",
    "org.mongodb.",
    "com.mongodb.",
    "redis.clients.",
    "io.lettuce.",
    "org.redisson.",
    "io.github.resilience4j.",
    "co.elastic.apm.",
    "datadog.trace.",
    "org.junit.",
    "org.springframework.aop.",
    "org.springframework.aot.",
    "org.springframework.beans.",
    "org.springframework.boot.",
    "org.springframework.cache.",
    "org.springframework.cglib.",
    "org.springframework.cloud.",
    "org.springframework.context.",
    "org.springframework.core.",
    "org.springframework.dao.",
    "org.springframework.data.",
    "org.springframework.expression.",
    "org.springframework.format.",
    "org.springframework.http.",
    "org.springframework.integration.",
    "org.springframework.jdbc.",
    "org.springframework.jms.",
    "org.springframework.kafka.",
    "org.springframework.amqp.",
    "org.springframework.batch.",
    "org.springframework.messaging.",
    "org.springframework.orm.",
    "org.springframework.r2dbc.",
    "org.springframework.retry.",
    "org.springframework.scheduling.",
    "org.springframework.security.",
    "org.springframework.session.",
    "org.springframework.transaction.",
    "org.springframework.util.",
    "org.springframework.validation.",
    "org.springframework.web.",
    "org.springframework.graphql.",
    "org.springframework.hateoas.",
];

/// Frames no code was written for: proxies, reflection accessors, lambdas' and bytecode
/// generators' classes. They are never a call site, nor part of one (the JVM swaps a
/// reflective accessor for a generated one after 15 calls: the same loop, another stack).
pub fn synthetic(function: &str) -> bool {
    const MARKS: &[&str] = &[
        "$$Lambda",
        "$$SpringCGLIB$$",
        "$$EnhancerBySpringCGLIB$$",
        "$$FastClassBySpringCGLIB$$",
        "$HibernateProxy$",
        "$ByteBuddy$",
        "$MockitoMock$",
        "_$$_jvst",
        "CGLIB$",
        "GeneratedMethodAccessor",
        "GeneratedConstructorAccessor",
        "DirectMethodHandleAccessor",
        "NativeMethodAccessorImpl",
        "DelegatingMethodAccessorImpl",
        "LambdaForm$",
    ];
    MARKS.iter().any(|m| function.contains(m))
        || function.starts_with("$Proxy")
        || function.contains(".$Proxy")
}

/// The application's package learned from a request handler's method (the handler span's
/// `code.function.name`, e.g. `org.apache.shop.web.OrderController.list`): its package, one
/// level up when deep enough (`org.apache.shop`), so the data layer beside the web layer is
/// included. None for a framework's own handler (static resources, error pages) or a name
/// that is no JVM method.
pub fn learned_java_package(handler: &str) -> Option<String> {
    // Vendor namespaces an application may live in; any other library package is a
    // framework's handler, never the application's.
    const VENDOR_WIDE: &[&str] = &[
        "org.apache.",
        "org.eclipse.",
        "org.jboss.",
        "org.glassfish.",
    ];
    let library = JAVA_LIBRARIES
        .iter()
        .filter(|p| !VENDOR_WIDE.contains(p))
        .any(|p| handler.starts_with(p));
    if library || synthetic(handler) || handler.contains(['/', ' ', '(']) {
        return None;
    }
    let segments: Vec<&str> = handler.split('.').collect();
    // package segments, class, method
    if segments.len() < 4 || segments.iter().any(|s| s.is_empty()) {
        return None;
    }
    let package = &segments[..segments.len() - 2];
    let keep = if package.len() > 3 {
        package.len() - 1
    } else {
        package.len()
    };
    Some(format!("{}.", package[..keep].join(".")))
}

fn java_app(function: &str) -> bool {
    !(JAVA_LIBRARIES.iter().any(|p| function.starts_with(p)) || synthetic(function))
}

/// .NET namespaces of the runtime and common libraries.
fn dotnet_app(function: &str) -> bool {
    const LIBRARY: &[&str] = &[
        "System.",
        "Microsoft.",
        "Npgsql.",
        "Dapper.",
        "OpenTelemetry.",
        "MySqlConnector.",
        "MySql.",
        "Oracle.",
        "StackExchange.",
        "Newtonsoft.",
        "Polly.",
        "Castle.",
        "NHibernate.",
        "Pomelo.",
        "Swashbuckle.",
        "lambda_method",
    ];
    !(LIBRARY.iter().any(|p| function.starts_with(p)) || function.contains("<>c"))
}

/// Node: a file of the application's own, not Node's (`node:`, `internal/`), a package's,
/// a launcher's, or V8's frames without a file (`new Promise (<anonymous>)`, `native`).
fn node_app(file: &str) -> bool {
    !(file.is_empty()
        || file.starts_with("node:")
        || file.contains("node_modules")
        || file.starts_with("internal/")
        || file.starts_with('<')
        || file == "native"
        || entry_point(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_scripts_and_v8s_anonymous_frames_are_never_the_application() {
        // gunicorn's console script in a venv is the root of every stack of its workers
        let text = "  File \"/srv/venv/bin/gunicorn\", line 8, in <module>
    sys.exit(run())
  File \"/srv/venv/lib/python3.11/site-packages/gunicorn/app/wsgiapp.py\", line 66, in run
    WSGIApplication(\"%(prog)s [OPTIONS] [APP_MODULE]\", prog=prog).run()
  File \"/srv/app/conduit/articles/views.py\", line 42, in get_articles
    return schema.dump(articles)
";
        let app_functions = |text: &str, language: Language| -> Vec<String> {
            let frames = parse(text, Some(language));
            frames
                .into_iter()
                .filter(|f| f.app)
                .map(|f| f.function)
                .collect()
        };
        assert_eq!(app_functions(text, Language::Python), ["get_articles"]);
        for launcher in [
            "/usr/local/bin/celery",
            "C:\\app\\venv\\Scripts\\uwsgi.exe",
            "/usr/bin/gunicorn",
        ] {
            assert!(!python_app(launcher), "{launcher}");
        }
        assert!(python_app("/srv/app/bin_tools/report.py"));
        let text = "Error
    at Query.run (/srv/app/node_modules/pg/lib/query.js:10:5)
    at new Promise (<anonymous>)
    at Object.<anonymous> (/srv/app/node_modules/.bin/ts-node:3:1)
    at listArticles (/srv/app/src/articles.js:31:7)";
        assert_eq!(app_functions(text, Language::Node), ["listArticles"]);
    }

    #[test]
    fn java_stack_from_the_span_stacktrace_processor() {
        let text = "\tat io.opentelemetry.javaagent.shaded.instrumentation.api.instrumenter.Instrumenter.doEnd(Instrumenter.java:325)
\tat org.sqlite.jdbc3.JDBC3PreparedStatement.executeQuery(JDBC3PreparedStatement.java:88)
\tat App.isSpecial(App.java:71)
\tat App.special(App.java:64)
\tat App.lambda$route$0(App.java:40)
\tat jdk.httpserver/com.sun.net.httpserver.Filter$Chain.doFilter(Filter.java:95)
\t... 13 more";
        let frames = parse(text, Some(Language::Java));
        assert_eq!(frames.len(), 6);
        assert_eq!(
            frames[0].function,
            "com.sun.net.httpserver.Filter$Chain.doFilter"
        );
        assert!(!frames[0].app);
        let app: Vec<String> = frames.iter().filter(|f| f.app).map(Frame::label).collect();
        assert_eq!(
            app,
            [
                "App.lambda$route$0 (App.java:40)",
                "App.special (App.java:64)",
                "App.isSpecial (App.java:71)"
            ]
        );
    }

    #[test]
    fn python_stack_from_format_stack() {
        let text = r#"  File "/usr/lib/python3.11/threading.py", line 995, in _bootstrap
    self._bootstrap_inner()
  File "/srv/app/venv/lib/python3.11/site-packages/flask/app.py", line 880, in full_dispatch_request
    rv = self.dispatch_request()
  File "/srv/app/shop/views.py", line 31, in orders
    for order in orders:
  File "/srv/app/shop/views.py", line 34, in orders
    cur.execute("SELECT ...", (order.id,))
"#;
        let frames = parse(text, None);
        assert_eq!(frames.len(), 4);
        assert_eq!(frames[3].location(), "/srv/app/shop/views.py:34");
        assert_eq!(frames.iter().filter(|f| f.app).count(), 2);
        assert_eq!(frames[3].label(), "orders (shop/views.py:34)");
    }

    #[test]
    fn go_stack_from_runtime_stack() {
        let text = "goroutine 7 [running]:
main.loadAuthors(0xc000010000)
\t/src/shop/main.go:42 +0x1d
main.handler({0x7f, 0x1})
\t/src/shop/main.go:30 +0x55
net/http.HandlerFunc.ServeHTTP(0x0?, {0x0?, 0x0?})
\t/usr/local/go/src/net/http/server.go:2136 +0x29
";
        let frames = parse(text, Some(Language::Go));
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[2].function, "main.loadAuthors");
        assert_eq!(frames[2].line, Some(42));
        assert!(!frames[0].app && frames[1].app && frames[2].app);
    }

    #[test]
    fn node_stack() {
        let text = "Error
    at Query.run (/srv/app/node_modules/pg/lib/query.js:10:5)
    at loadBooks (/srv/app/src/books.js:21:13)
    at async handler (/srv/app/src/server.js:8:3)
    at node:internal/process/task_queues:95:5";
        let frames = parse(text, Some(Language::Node));
        assert_eq!(frames.len(), 4);
        let app: Vec<String> = frames
            .iter()
            .filter(|f| f.app)
            .map(Frame::location)
            .collect();
        assert_eq!(
            app,
            ["/srv/app/src/server.js:8", "/srv/app/src/books.js:21"]
        );
    }

    #[test]
    fn an_application_under_a_framework_vendors_namespace_is_the_application() {
        let text = "\tat io.opentelemetry.javaagent.shaded.instrumentation.api.instrumenter.Instrumenter.doEnd(Instrumenter.java:325)
\tat org.hibernate.loader.ast.internal.SingleIdLoadPlan.load(SingleIdLoadPlan.java:140)
\tat jdk.internal.reflect.GeneratedMethodAccessor42.invoke(Unknown Source)
\tat org.springframework.samples.petclinic.owner.OwnerController$$SpringCGLIB$$0.showOwner(<generated>)
\tat org.springframework.samples.petclinic.owner.OwnerController.showOwner(OwnerController.java:171)
\tat org.springframework.web.servlet.FrameworkServlet.service(FrameworkServlet.java:885)
\tat org.apache.catalina.core.ApplicationFilterChain.doFilter(ApplicationFilterChain.java:140)";
        let frames = parse(text, Some(Language::Java));
        let app: Vec<String> = frames.iter().filter(|f| f.app).map(Frame::label).collect();
        assert_eq!(app, ["org.springframework.samples.petclinic.owner.OwnerController.showOwner (OwnerController.java:171)"]);
        for (function, is_app) in [
            ("com.google.mycompany.billing.Invoices.load", true),
            ("com.google.common.collect.Lists.newArrayList", false),
            ("shop.App$$Lambda/0x0000000801234.run", false),
            ("jdk.proxy2.$Proxy123.findById", false),
            ("com.sun.proxy.$Proxy55.findAll", false),
            ("shop.Owner$HibernateProxy$Xyz.getPets", false),
            (
                "org.springframework.data.jpa.repository.support.SimpleJpaRepository.findById",
                false,
            ),
        ] {
            assert_eq!(java_app(function), is_app, "{function}");
        }
    }

    #[test]
    fn the_apps_package_is_learned_from_its_handlers_but_never_a_frameworks() {
        for (handler, learned) in [
            ("org.apache.shop.web.OrderController.list", Some("org.apache.shop.")),
            ("com.acme.web.Orders.list", Some("com.acme.web.")),
            (
                "org.springframework.samples.petclinic.owner.OwnerController.showOwner",
                Some("org.springframework.samples.petclinic."),
            ),
            (
                "org.springframework.web.servlet.resource.ResourceHttpRequestHandler.handleRequest",
                None,
            ),
            ("org.springframework.boot.autoconfigure.web.servlet.error.BasicErrorController.error", None),
            ("Main.handle", None),
            ("/srv/app/views.py", None),
            ("shop.App$$Lambda/0x1.run", None),
        ] {
            assert_eq!(learned_java_package(handler).as_deref(), learned, "{handler}");
        }
    }

    #[test]
    fn python_app_folders_named_like_libraries_stay_the_apps() {
        let text = r#"  File "/srv/app/opentelemetry/handlers.py", line 9, in load
    x
  File "/srv/venv/lib/python3.11/site-packages/opentelemetry/instrumentation/dbapi/__init__.py", line 500, in execute
    y
"#;
        let frames = parse(text, Some(Language::Python));
        assert!(frames[0].app);
        assert!(!frames[1].app);
    }

    #[test]
    fn dotnet_stack_with_line_numbers() {
        let text = "   at Npgsql.NpgsqlCommand.ExecuteReader(CommandBehavior behavior)
   at Shop.Data.Orders.LoadLines(Int32 orderId) in /src/Shop/Data/Orders.cs:line 42
   at Shop.Controllers.OrdersController.Index() in /src/Shop/Controllers/OrdersController.cs:line 17
   at lambda_method12(Closure, Object, Object[])
   at Microsoft.AspNetCore.Mvc.Infrastructure.ActionMethodExecutor.Execute(Object x)";
        let frames = parse(text, None);
        assert_eq!(frames.len(), 5);
        let app: Vec<String> = frames
            .iter()
            .filter(|f| f.app)
            .map(Frame::location)
            .collect();
        assert_eq!(
            app,
            [
                "/src/Shop/Controllers/OrdersController.cs:17",
                "/src/Shop/Data/Orders.cs:42"
            ]
        );
        assert_eq!(frames[4].function, "Npgsql.NpgsqlCommand.ExecuteReader");
    }

    #[test]
    fn garbage_gives_no_frames_and_no_panic() {
        for text in [
            "",
            "\n\n",
            "at",
            "at (",
            "File \"",
            "File \"x\", line ",
            "goroutine\n\t",
            "at x(:)",
            "\tat a/b(c:d:e:f)",
        ] {
            let _ = parse(text, None);
            for lang in [
                Language::Java,
                Language::Python,
                Language::Go,
                Language::Node,
                Language::DotNet,
            ] {
                let _ = parse(text, Some(lang));
            }
        }
    }
}
