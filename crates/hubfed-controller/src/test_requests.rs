//! A `kube::Client` that answers every request with one fixed JSON body and records what
//! was asked: for narrow request-shape checks only (what crosses the API is proven against
//! real API servers in the e2e tests).

use parking_lot::Mutex;
use std::sync::Arc;

use kube::client::Body;

/// One request as the client sent it.
#[derive(Debug)]
pub struct SeenRequest {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    pub query: String,
    pub accept: String,
    pub content_type: String,
    pub body: Vec<u8>,
}

/// The requests a client made, in order.
#[derive(Clone, Default)]
pub struct Seen(Arc<Mutex<Vec<SeenRequest>>>);

impl Seen {
    pub fn take(&self) -> Vec<SeenRequest> {
        std::mem::take(&mut *self.0.lock())
    }
}

/// A client answering `answer` (200) to every request, recording each in `seen`.
pub fn answering(seen: &Seen, answer: serde_json::Value) -> kube::Client {
    answering_with(seen, 200, answer)
}

/// A client answering `answer` with HTTP status `code` to every request, recording each in
/// `seen`.
pub fn answering_with(seen: &Seen, code: u16, answer: serde_json::Value) -> kube::Client {
    let seen = seen.clone();
    let answer = serde_json::to_vec(&answer).unwrap();
    let service = tower::service_fn(move |request: http::Request<Body>| {
        let (seen, answer) = (seen.clone(), answer.clone());
        async move {
            let (parts, body) = request.into_parts();
            let header = |name| {
                parts
                    .headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned()
            };
            let seen_request = SeenRequest {
                method: parts.method.to_string(),
                path: parts.uri.path().to_owned(),
                query: parts.uri.query().unwrap_or_default().to_owned(),
                accept: header(http::header::ACCEPT),
                content_type: header(http::header::CONTENT_TYPE),
                body: body.collect_bytes().await.unwrap().to_vec(),
            };
            seen.0.lock().push(seen_request);
            let response = http::Response::builder()
                .status(code)
                .body(Body::from(answer))
                .unwrap();
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    kube::Client::new(service, "default")
}
