//! The API client from `clientConnection` / `--kubeconfig` / `--master`, with the request rate
//! limit and the reachability probe in its stack.
//!
//! As upstream: a kubeconfig file when given, else what kube-rs infers (`$KUBECONFIG`,
//! `~/.kube/config`, then the in-cluster service account); `--master` replaces the server URL
//! of either. Requests are JSON (kube-rs has no protobuf), except the lists of Services and
//! EndpointSlices, asked for as protobuf by `list_watch` when `contentType` says so.

use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::Error;
use super::rate_limit::RateLimitLayer;
use super::reachability::Reachability;
use crate::config::ClientConnection;

/// A client for `connection`, and the reachability state its requests feed.
pub async fn client(connection: &ClientConnection) -> Result<(Client, Reachability), Error> {
    let config = config(connection).await?;
    tracing::info!(
        server = %config.cluster_url,
        qps = connection.qps,
        burst = connection.burst,
        "source: API server"
    );
    let reachability = Reachability::new(&config.cluster_url);
    let client = ClientBuilder::try_from(config)
        .map_err(Error::Client)?
        .with_layer(&reachability.layer())
        .with_layer(&RateLimitLayer::new(connection.qps, connection.burst))
        .build();
    Ok((client, reachability))
}

async fn config(connection: &ClientConnection) -> Result<Config, Error> {
    let master = match &connection.master {
        Some(url) => Some(url.parse::<http::Uri>().map_err(|source| Error::Master {
            url: url.clone(),
            source,
        })?),
        None => None,
    };
    let mut config = match (&connection.kubeconfig, master.clone()) {
        (Some(path), _) => {
            let file = Kubeconfig::read_from(path).map_err(|source| Error::Kubeconfig {
                path: path.clone(),
                source,
            })?;
            Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|source| Error::Kubeconfig {
                    path: path.clone(),
                    source,
                })?
        }
        (None, master) => match Config::infer().await {
            Ok(config) => config,
            // Upstream accepts `--master` alone (an unauthenticated endpoint).
            Err(_) if master.is_some() => Config::new(master.clone().unwrap_or_default()),
            Err(source) => return Err(Error::Infer(source)),
        },
    };
    if let Some(url) = master {
        config.cluster_url = url;
    }
    Ok(config)
}
