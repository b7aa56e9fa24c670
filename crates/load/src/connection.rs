//! One client connection: TCP (and TLS) to the target, an HTTP/1.1 keep-alive session over
//! hyper, and the classification of every failure into an [`ErrorKind`].
//! It never retries by itself: the caller decides, and counts.

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use kiln_record::ErrorKind;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

use crate::plan::{LoadPlan, Target};

/// What every connection of a phase shares: the target, the TLS setup, the request.
pub struct ConnectionSetup {
    pub target: Target,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
    request: http::Request<Full<Bytes>>,
    pub connect_timeout: Duration,
}

impl ConnectionSetup {
    pub fn new(plan: &LoadPlan) -> Result<Self, String> {
        let target = plan.target.clone();
        let tls = if target.tls {
            let config = tls_config(plan.insecure);
            let name = ServerName::try_from(target.host.clone())
                .map_err(|e| format!("'{}' is not a valid TLS server name: {e}", target.host))?;
            Some((tokio_rustls::TlsConnector::from(Arc::new(config)), name))
        } else {
            None
        };
        let mut builder = http::Request::builder()
            .method(plan.request.method.clone())
            .uri(target.path_and_query.as_str())
            .header(http::header::HOST, target.authority.as_str());
        for (name, value) in &plan.request.headers {
            builder = builder.header(name, value);
        }
        let request = builder
            .body(Full::new(plan.request.body.clone()))
            .map_err(|e| format!("cannot build the request: {e}"))?;
        Ok(Self {
            target,
            tls,
            request,
            connect_timeout: plan.connect_timeout,
        })
    }

    /// A fresh copy of the request (headers and body are reference-counted).
    fn request(&self) -> http::Request<Full<Bytes>> {
        let mut req = http::Request::new(self.request.body().clone());
        *req.method_mut() = self.request.method().clone();
        *req.uri_mut() = self.request.uri().clone();
        *req.headers_mut() = self.request.headers().clone();
        req
    }

    /// Opens a connection and completes the HTTP/1.1 (and TLS) handshake. The connection's
    /// I/O runs as a local task on the current thread.
    pub async fn connect(&self) -> Result<Connection, ErrorKind> {
        let tcp = tokio::time::timeout(self.connect_timeout, TcpStream::connect(self.target.addr))
            .await
            .map_err(|_| ErrorKind::ConnectTimeout)?
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::ConnectionRefused => ErrorKind::ConnectRefused,
                std::io::ErrorKind::TimedOut => ErrorKind::ConnectTimeout,
                _ => ErrorKind::ConnectOther,
            })?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => handshake(tcp).await,
            Some((connector, name)) => {
                let tls = tokio::time::timeout(
                    self.connect_timeout,
                    connector.connect(name.clone(), tcp),
                )
                .await
                .map_err(|_| ErrorKind::ConnectTimeout)?
                .map_err(|_| ErrorKind::Tls)?;
                handshake(tls).await
            }
        }
    }
}

async fn handshake<S>(io: S) -> Result<Connection, ErrorKind>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| classify(&e))?;
    Ok(Connection {
        sender,
        io: Some(Box::pin(conn)),
    })
}

/// hyper's connection state machine (the socket I/O), type-erased over plain TCP and TLS.
type ConnectionIo = Pin<Box<dyn Future<Output = hyper::Result<()>>>>;

/// An open keep-alive connection. Its I/O is driven inside the task that sends the request
/// rather than in a task of its own: one task and no cross-task wake-up per request, which
/// is a large share of a load generator's own CPU.
pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
    /// `None` once hyper has finished the connection (closed by either side).
    io: Option<ConnectionIo>,
}

/// A complete response: its status and body size.
pub struct Response {
    pub status: u16,
    pub body_bytes: u64,
}

impl Connection {
    /// Waits until the connection can take a request; false if the target closed it
    /// (e.g. after its keep-alive limit), which is not an error.
    pub async fn ready(&mut self) -> bool {
        if self.sender.is_closed() {
            return false;
        }
        let sender = &mut self.sender;
        matches!(
            drive(&mut self.io, poll_fn(|cx| sender.poll_ready(cx))).await,
            Ok(Ok(()))
        )
    }

    /// Sends the request and reads the whole response body.
    pub async fn send(&mut self, setup: &ConnectionSetup) -> Result<Response, ErrorKind> {
        let response = drive(&mut self.io, self.sender.send_request(setup.request()))
            .await?
            .map_err(|e| classify(&e))?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut body_bytes = 0u64;
        while let Some(frame) = drive(&mut self.io, body.frame()).await? {
            let frame = frame.map_err(|e| classify(&e))?;
            if let Some(data) = frame.data_ref() {
                body_bytes += data.len() as u64;
            }
        }
        Ok(Response { status, body_bytes })
    }
}

/// Polls `work` and, while it waits, the connection's I/O that will complete it. A failed
/// connection fails the work; a finished one leaves `work` to finish from what was read.
async fn drive<F: Future>(io: &mut Option<ConnectionIo>, work: F) -> Result<F::Output, ErrorKind> {
    let mut work = pin!(work);
    poll_fn(|cx| {
        if let Poll::Ready(out) = work.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        if let Some(conn) = io.as_mut() {
            if let Poll::Ready(result) = conn.as_mut().poll(cx) {
                *io = None;
                if let Err(e) = result {
                    return Poll::Ready(Err(classify(&e)));
                }
            }
            // The I/O may have completed the work just now.
            if let Poll::Ready(out) = work.as_mut().poll(cx) {
                return Poll::Ready(Ok(out));
            }
        }
        Poll::Pending
    })
    .await
}

/// Maps a hyper error to what a user should read.
fn classify(e: &hyper::Error) -> ErrorKind {
    if e.is_parse() || e.is_parse_status() || e.is_parse_too_large() {
        return ErrorKind::BadResponse;
    }
    if e.is_timeout() {
        return ErrorKind::Timeout;
    }
    if e.is_incomplete_message() || e.is_canceled() || e.is_closed() {
        return ErrorKind::Reset;
    }
    let mut source = std::error::Error::source(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::BrokenPipe
                | std::io::ErrorKind::UnexpectedEof => ErrorKind::Reset,
                std::io::ErrorKind::TimedOut => ErrorKind::Timeout,
                std::io::ErrorKind::InvalidData => ErrorKind::Tls,
                _ => ErrorKind::Other,
            };
        }
        source = err.source();
    }
    ErrorKind::Other
}

fn tls_config(insecure: bool) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions");
    let mut config = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
            .with_no_client_auth()
    } else {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

/// `--insecure`: accepts any certificate but still checks handshake signatures.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
