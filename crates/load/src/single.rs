//! One request outside a run, on a connection of its own closed after it: what kiln asks a
//! target before the load (a gRPC server's reflection service), over the same connections,
//! TLS and HTTP/2 as the load's.

use std::time::Duration;

use kiln_record::ErrorKind;

use crate::connection::ConnectionSetup;
use crate::http1::{Captured, RequestParts, Response};
use crate::plan::Target;

/// Sends `request` to `target` and reads its whole answer (headers and up to
/// [`crate::http1::MAX_CAPTURED_BODY`] of body kept), within `connect_timeout` to connect and
/// `timeout` for the rest.
pub fn exchange(
    target: &Target,
    insecure: bool,
    http2: bool,
    connect_timeout: Duration,
    timeout: Duration,
    request: &RequestParts,
) -> Result<(Response, Captured), ErrorKind> {
    let setup = ConnectionSetup::for_origin(target, insecure, connect_timeout, http2)
        .map_err(|_| ErrorKind::Tls)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|_| ErrorKind::Other)?;
    // HTTP/2's connection task is a local one, as on the load threads
    tokio::task::LocalSet::new().block_on(&rt, async {
        let mut connection = setup.connect().await?;
        let answer = connection.send_request(request, &target.authority, true);
        tokio::time::timeout(timeout, answer)
            .await
            .map_err(|_| ErrorKind::Timeout)?
    })
}
