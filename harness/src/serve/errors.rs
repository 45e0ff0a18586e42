//! OpenAI-style error responses: `{"error": {"message", "type", "param", "code"}}`
//! with the HTTP status that says whose fault it is.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// An error answered to the client (every refusal of the server is one).
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status (4xx: the request; 5xx: the server).
    pub status: StatusCode,
    /// What went wrong, in words a user can act on.
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, …
    pub kind: &'static str,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// OpenAI's `code`: `context_length_exceeded`, `model_not_found`, …
    pub code: Option<&'static str>,
    /// Seconds for a `Retry-After` header (429, 503).
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400: a bad value of request field `param`.
    pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.to_string()),
            ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
        }
    }

    /// 400: a request that is not a JSON object.
    pub fn bad_json(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// Sets `code`.
    pub fn with_code(self, code: &'static str) -> ApiError {
        ApiError {
            code: Some(code),
            ..self
        }
    }

    /// 401: a missing or wrong API key.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "authentication_error", message)
            .with_code("invalid_api_key")
    }

    /// 404: a model this server does not serve.
    pub fn model_not_found(model: &str, served: &str) -> ApiError {
        ApiError {
            param: Some("model".into()),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("The model `{model}` does not exist; this server serves `{served}`."),
            )
            .with_code("model_not_found")
        }
    }

    /// 404: no such route.
    pub fn no_route(method: &str, path: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("Unknown request URL: {method} {path}."),
        )
        .with_code("unknown_url")
    }

    /// 405: the route exists for another method.
    pub fn method_not_allowed(method: &str, path: &str) -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            format!("{method} is not allowed on {path}."),
        )
        .with_code("method_not_allowed")
    }

    /// 413: a body over the server's limit.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("The request body is larger than this server's limit of {limit} bytes (--max-body)."),
        )
        .with_code("request_too_large")
    }

    /// 408: the body did not arrive within the request time limit.
    pub fn body_timeout(secs: f64) -> ApiError {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!("The request body did not arrive within {secs} s (--request-timeout)."),
        )
        .with_code("request_timeout")
    }

    /// 429: the batch and its queue are full.
    pub fn busy(max_batch: usize, queue: usize) -> ApiError {
        ApiError {
            retry_after: Some(1),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                format!(
                    "The server is busy: {max_batch} sequences decoding and {queue} waiting (--max-batch, --queue). Retry shortly."
                ),
            )
            .with_code("rate_limit_exceeded")
        }
    }

    /// 503: the server is shutting down.
    pub fn shutting_down() -> ApiError {
        ApiError {
            retry_after: Some(1),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "The server is shutting down.",
            )
            .with_code("shutting_down")
        }
    }

    /// 504: the request ran past the request time limit.
    pub fn timed_out(secs: f64) -> ApiError {
        ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "timeout_error",
            format!("The request did not finish within {secs} s (--request-timeout)."),
        )
        .with_code("timeout")
    }

    /// 500: the engine failed (an IO error, non-finite logits, …).
    pub fn server(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The error object (`{"error": {...}}`), also sent as a stream's final event.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}
