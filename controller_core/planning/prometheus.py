"""Producer and consumer rates per topic from Prometheus' HTTP query API (``/api/v1/query``).

The Kafka admin API has no traffic figures; brokers export them over JMX, which the usual
Prometheus JMX exporter rules name ``kafka_server_brokertopicmetrics_bytesin_total`` and
``..._bytesout_total`` (per broker and topic; bytes out counts consumers, not replication).
A topic's rate is the sum over brokers; the planner wants partitions, which these metrics do
not break down, so a topic's rate is split evenly over its partitions (said in the manifest).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

BYTES_IN = "kafka_server_brokertopicmetrics_bytesin_total"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"


class PrometheusError(ValueError):
    """Prometheus could not answer; the message names --prometheus and what to check."""


@dataclass(frozen=True, slots=True)
class TopicRates:
    bytes_in: dict[str, float]  # topic -> bytes/s produced
    bytes_out: dict[str, float]  # topic -> bytes/s consumed
    queries: tuple[str, str]


def query_for(metric: str, window: str, labels: str = "") -> str:
    selector = ",".join(part for part in ('topic!=""', labels.strip().strip("{}")) if part)
    return f"sum by (topic) (rate({metric}{{{selector}}}[{window}]))"


def instant_query(base_url: str, query: str, timeout: float = 10.0) -> dict[str, float]:
    """``{topic: value}`` of an instant vector query grouped by topic."""
    if urllib.parse.urlsplit(base_url).scheme not in ("http", "https"):
        raise PrometheusError(f"--prometheus {base_url}: expected an http:// or https:// URL, "
                              "e.g. http://prometheus:9090")
    url = base_url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as e:
        detail = e.read()[:300].decode("utf-8", "replace")
        raise PrometheusError(f"--prometheus {base_url}: HTTP {e.code} for {query!r}: "
                              f"{detail}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise PrometheusError(f"--prometheus {base_url}: cannot reach it ({reason}); check the "
                              "URL (e.g. http://prometheus:9090)") from None
    try:
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise PrometheusError(f"--prometheus {base_url}: query {query!r} failed: "
                                  f"{doc.get('errorType')}: {doc.get('error')}")
        data = doc["data"]
        if data["resultType"] != "vector":
            raise PrometheusError(f"--prometheus {base_url}: expected a vector for {query!r}, "
                                  f"got {data['resultType']}")
        out: dict[str, float] = {}
        for sample in data["result"]:
            topic = sample["metric"].get("topic")
            if topic:
                out[topic] = out.get(topic, 0.0) + float(sample["value"][1])
        return out
    except (ValueError, KeyError, TypeError, IndexError) as e:
        if isinstance(e, PrometheusError):
            raise
        raise PrometheusError(f"--prometheus {base_url}: not a Prometheus query API answer "
                              f"({type(e).__name__}); is the URL Prometheus' own?") from None


def topic_rates(base_url: str, *, window: str = "5m", labels: str = "") -> TopicRates:
    q_in, q_out = query_for(BYTES_IN, window, labels), query_for(BYTES_OUT, window, labels)
    return TopicRates(instant_query(base_url, q_in), instant_query(base_url, q_out),
                      (q_in, q_out))
