use axum::body::Body;
use axum::http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;

use super::*;
use crate::testing::{bare_state, send};

async fn body_text(res: Response<Body>) -> String {
    let body = res.into_body().collect().await.map(|b| b.to_bytes());
    String::from_utf8_lossy(&body.unwrap_or_default()).into_owned()
}

fn id(res: &Response<Body>) -> String {
    res.headers()[&X_REQUEST_ID]
        .to_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn trace_ids_come_from_valid_traceparents_only() {
    let tp = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    assert_eq!(trace_id(tp), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
    for bad in [
        &b"00-00000000000000000000000000000000-00f067aa0ba902b7-01"[..],
        b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        b"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        b"garbage",
    ] {
        assert_eq!(trace_id(bad), None, "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn generated_ids_are_32_hex_digits_and_differ() {
    let a = request_id(&HeaderMap::new());
    let b = request_id(&HeaderMap::new());
    let a = a.to_str().unwrap_or_default().to_owned();
    assert_eq!(a.len(), 32);
    assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(a, b.to_str().unwrap_or_default());
}

/// The response carries the request ID: the client's `x-request-id`, else the
/// `traceparent` trace-id, else a generated one.
#[tokio::test]
async fn request_ids_are_echoed_honoured_or_generated() {
    let (_sim, state) = bare_state(crate::Settings::default()).await;
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let req = Request::get("/api/v2/ping")
        .header("x-request-id", "client-chosen-1")
        .header("traceparent", tp)
        .body(Body::empty())
        .unwrap_or_default();
    let res = send(&state, req).await;
    assert_eq!(id(&res), "client-chosen-1");
    assert_eq!(
        res.headers()["x-content-type-options"],
        "nosniff",
        "every answer says it is not to be sniffed (issue 39 §11)"
    );
    let req = Request::get("/nothing")
        .header("traceparent", tp)
        .body(Body::empty())
        .unwrap_or_default();
    assert_eq!(
        id(&send(&state, req).await),
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    let req = Request::get("/api/v2/ping")
        .body(Body::empty())
        .unwrap_or_default();
    assert_eq!(id(&send(&state, req).await).len(), 32);
}

/// A handler that panics, in its call or while it runs, answers a 500 JSON:API document
/// without the panic's words, with its request ID, counted as a 500.
#[tokio::test]
async fn a_panicking_handler_answers_500() {
    let (_sim, state) = bare_state(crate::Settings::default()).await;
    let app = axum::Router::new()
        .route(
            "/boom",
            axum::routing::get(|| async {
                let v: Vec<u8> = Vec::new();
                if v.is_empty() {
                    panic!("secret-detail");
                }
                "unreachable"
            }),
        )
        .layer(RequestLayer::new(state.metrics.clone()));
    for _ in 0..2 {
        let req = Request::get("/boom")
            .body(Body::empty())
            .unwrap_or_default();
        let res = app
            .clone()
            .oneshot(req)
            .await
            .unwrap_or_else(|e| match e {});
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(id(&res).len(), 32);
        let text = body_text(res).await;
        assert!(text.contains("internal server error"), "{text}");
        assert!(!text.contains("secret-detail"), "{text}");
    }
    let metrics = state.metrics.encode();
    assert!(
        metrics
            .contains(r#"terrace_api_requests_total{route="/boom",method="GET",status="500"} 2"#),
        "{metrics}"
    );
}

/// Bodies over the global limit: by Content-Length, a 413 before the handler runs; without
/// one, the body is cut at the limit and the handler's extractor answers 413. Under the
/// limit, the body reaches the handler whole.
#[tokio::test]
async fn bodies_over_the_limit_are_413() {
    let (sim, state) = bare_state(crate::Settings {
        max_body_bytes: 100,
        ..Default::default()
    })
    .await;
    let token = format!("Bearer {}", sim.admin_token());
    let post = |len: Option<usize>, body: Body| {
        let b = Request::post("/api/v2/organizations")
            .header("authorization", &token)
            .header("content-type", "application/vnd.api+json");
        let b = match len {
            Some(n) => b.header("content-length", n.to_string()),
            None => b,
        };
        b.body(body).unwrap_or_default()
    };
    let res = send(&state, post(Some(101), Body::empty())).await;
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let text = body_text(res).await;
    assert!(
        text.contains("larger than this endpoint accepts (100 bytes)"),
        "{text}"
    );

    let chunks = futures::stream::iter(
        (0..5).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b' '; 30]))),
    );
    let res = send(&state, post(None, Body::from_stream(chunks))).await;
    assert_eq!(
        res.status(),
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        body_text(res).await
    );

    // Within the limit the body reaches the handler whole (and is read: 422 for `{}`).
    let res = send(&state, post(None, Body::from("{}"))).await;
    assert_eq!(
        res.status(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        body_text(res).await
    );
}
