"""What h2ping is measured against: the line-up of peers and how each is started
(lineup), the Go sidecar's binary (gopeer), the aiohttp + httpx proxy (baseline_proxy)."""
