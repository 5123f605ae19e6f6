"""Is this a sentence or a list of words? The measure that stops keyword lists from earning points.

English prose is roughly 40% function words ("the", "is", "when", "because"); a keyword list or a
line of product names has almost none. A text is prose when it is long enough to say something,
its function-word share is above a floor, and it is not mostly technology names without a reason.
"""

from __future__ import annotations

import re

WORD = re.compile(r"[A-Za-z][\w'’-]*")

FUNCTION_WORDS = frozenset(
    """a an the is are was were be been being will would can could should must may might do does did
    has have had it its this that these those they them their we our us you your i if when whenever then
    than so because since while until unless and or but not no nor to of in on at by for from with
    without into onto over under after before as each every any all which who whose what where why how
    there here also only just once again both either neither same other another more most less least
    per up down out off""".split()
)

# Words a design names instead of explaining. Lower case; multi-word names are matched as phrases.
TECH_NAMES = (
    "kafka", "redis", "zookeeper", "etcd", "consul", "cassandra", "dynamodb", "postgres", "postgresql",
    "mysql", "mongodb", "rabbitmq", "sqs", "sns", "kinesis", "pulsar", "nats", "kubernetes", "k8s",
    "docker", "airflow", "temporal", "celery", "sidekiq", "quartz", "spark", "flink", "hadoop",
    "elasticsearch", "s3", "bigtable", "spanner", "cockroachdb", "aurora", "rds", "lambda", "grpc",
    "graphql", "nginx", "envoy", "istio", "prometheus", "grafana", "datadog", "raft", "paxos",
    "memcached", "hbase", "vitess", "foundationdb", "eks", "ecs", "terraform", "helm", "cloudwatch",
    "pagerduty", "scylladb", "clickhouse", "bigquery", "pub/sub", "jaeger", "opentelemetry", "debezium",
    "skip locked", "api gateway", "load balancer", "service mesh", "step functions", "eventbridge",
)
TECH_NAME = re.compile(r"(?<![\w/])(" + "|".join(re.escape(n) for n in TECH_NAMES) + r")(?![\w/])", re.I)

# The words that introduce a reason. Shared with the tradeoff detector: a rejection needs one.
REASON = re.compile(
    r"\b(because|since|would|wouldn't|costs?|instead|so that|so we|which means|at the cost|means|"
    r"requires?|needs?|cannot|can't|can not|forces?|loses?|lose|risks?|adds?|breaks?|too \w+|"
    r"expensive|overkill|doesn't|does not|won't|harder|slower|worse|without|only if|unless|"
    r"given that|the price|otherwise|why|needed|unnecessary|simpler|enough|so|lost|gap|pins?|starves?|"
    r"no (\w+[- ])?(lease|fencing|ordering|guarantee|support|way)|"
    # what the alternative lacks: "has no epoch to reject the stale one", "offers no per-message ack"
    r"(has|have|had|gives?|offers?|keeps?|provides?) no|"
    # the cost as it grows: "lock contention grows with the number of nodes", "struggles at high trigger rates",
    # "a lot of constant load on MySQL", "a push queue is cheaper"
    r"contention|grows? with|struggles?|(constant|extra|more|heavy) load|cheaper|costlier|"
    # "we'd be rebuilding the timers", "its loop isn't designed for 50k runs a minute"
    r"(we|i|it|they|you)'d (be|have|need|lose|pay|spend|rebuild|reinvent|re-?implement|own|run)|"
    # the operational cost: "it's another cluster to run", "one more system to operate"
    r"(another|one more|an extra) (\w+ )?(cluster|system|service|dependency|database|component) to "
    r"(run|operate|maintain|learn|page on)|"
    r"(isn'?t|aren'?t|is not|are not|wasn'?t|not) (designed|built|meant|made) for)\b",
    re.I,
)

MIN_PROSE_WORDS = 6
MIN_FUNCTION_SHARE = 0.15


def words(text: str) -> list[str]:
    return WORD.findall(text)


def word_count(text: str) -> int:
    return len(words(text))


def tech_names(text: str) -> list[str]:
    return [m.group(1) for m in TECH_NAME.finditer(text)]


def is_name_drop(text: str) -> bool:
    """Mostly technology names and no reason: "Kafka for queueing, Redis for locks, ZooKeeper for leader"."""
    names = tech_names(text)
    if not names or REASON.search(text):
        return False
    content = [w for w in words(text) if w.lower() not in FUNCTION_WORDS]
    return len(names) * 2 >= len(content) or (len(names) >= 3 and len(names) * 4 >= len(content))


def is_prose(text: str) -> bool:
    ws = words(text)
    if len(ws) < MIN_PROSE_WORDS:
        return False
    function_share = sum(w.lower() in FUNCTION_WORDS for w in ws) / len(ws)
    return function_share >= MIN_FUNCTION_SHARE and not is_name_drop(text)
