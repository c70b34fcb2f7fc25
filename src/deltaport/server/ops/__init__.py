"""Operations: the request observer, Prometheus metrics, the audit log, IP access lists and trusted
proxies, the API document and its pages."""
