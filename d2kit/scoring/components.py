"""What a label or a sentence names: the components of a job scheduler, in the open words people use.

One vocabulary serves the drawing (a box's label) and section 5 of the document (its sentences), so
"executor", "runner" and "worker" are one component in both, and so are "DB", "Postgres" and "store".
"""

from __future__ import annotations

import re

# The components the diagram rubric grades, and the others a section 5 commonly names (for agreement only).
COMPONENT_WORDS: dict[str, tuple[str, ...]] = {
    "scheduler": (r"schedul", r"dispatch(er|ers)\b", r"planner", r"controller", r"coordinator", r"\btrigger(s|er)?\b",
                  r"\bcron\b", r"\btimer service", r"\bmaster\b", r"\bleader\b", r"\bticker"),
    "store": (r"\bdb\b", r"\bdbs\b", r"database", r"postgres", r"\bpg\b", r"mysql", r"\bsql\b", r"\bstore\b",
              r"\bstorage\b", r"cassandra", r"dynamo", r"spanner", r"cockroach", r"\brds\b", r"aurora", r"mongo",
              r"foundationdb", r"\bkv\b", r"key[- ]value", r"\bdatastore", r"\bjob ?store", r"\bstate ?store",
              r"\bscylla", r"\bbigtable", r"\bsqlite", r"\bredis\b",
              r"\bprimary\b.{0,20}\breplica|\breplica\b.{0,20}\bprimary"),
    "worker": (r"\bworkers?\b", r"executor", r"\brunners?\b", r"\bagents?\b", r"\bconsumers?\b", r"\bexec nodes?",
               r"\bjob hosts?", r"\bcompute nodes?", r"\blambdas?\b", r"serverless", r"\bfaas\b",
               r"cloud functions?", r"\bpods?\b", r"\bcontainers?\b"),
    "queue": (r"\bqueues?\b", r"\btopics?\b", r"\bstreams?\b", r"kafka", r"\bsqs\b", r"rabbit", r"pub/?sub",
              r"\bbroker", r"\bmessage bus", r"\bevent bus", r"kinesis", r"\bnats\b", r"redis stream", r"\bmq\b"),
    "client": (r"\bclients?\b", r"\busers?\b", r"\bapi\b", r"\bgateway", r"front ?end", r"\bcli\b", r"\btenants?\b",
               r"\bsubmitter", r"\bcallers?\b", r"\bui\b", r"\brest\b", r"\bhttp\b"),
    "coordination": (r"zookeeper", r"\betcd\b", r"\bconsul\b", r"\braft\b", r"\bchubby\b", r"lock service",
                     r"election service"),
    "cache": (r"\bcache\b", r"memcache"),
    "load_balancer": (r"load ?balancer", r"\blb\b", r"\belb\b", r"\balb\b", r"\bnginx\b", r"\bhaproxy"),
    "monitoring": (r"monitor", r"metrics", r"prometheus", r"alert", r"dashboard", r"\bobservab"),
    "dead_letter": (r"dead[- ]letter", r"\bdlq\b", r"parking lot"),
}
# Named technologies: "Postgres" in section 5 and "Redis" on the drawing are both a store, but not one system.
TECHNOLOGIES = ("postgres", "mysql", "redis", "cassandra", "dynamodb", "spanner", "cockroachdb", "mongodb", "etcd",
                "zookeeper", "consul", "kafka", "sqs", "rabbitmq", "kinesis", "nats", "pulsar", "lambda", "kubernetes",
                "temporal", "airflow", "quartz", "celery", "sidekiq", "s3", "elasticsearch", "foundationdb")
TECHNOLOGY_WORDS = {"postgres": r"postgres|\bpg\b|\bpsql\b", "dynamodb": r"dynamo", "cockroachdb": r"cockroach",
                    "mongodb": r"\bmongo", "rabbitmq": r"rabbit", "lambda": r"\blambdas?\b|aws lambda",
                    "kubernetes": r"kubernetes|\bk8s\b", "s3": r"\bs3\b"}
TECHNOLOGY_PATTERNS = {name: re.compile(TECHNOLOGY_WORDS.get(name, rf"\b{name}\b"), re.IGNORECASE)
                       for name in TECHNOLOGIES}
PATTERNS = {name: re.compile("|".join(words), re.IGNORECASE) for name, words in COMPONENT_WORDS.items()}
READABLE = {"scheduler": "scheduler", "store": "durable store", "worker": "workers", "queue": "queue / stream",
            "client": "client / API", "coordination": "coordination service (ZooKeeper, etcd)", "cache": "cache",
            "load_balancer": "load balancer", "monitoring": "monitoring", "dead_letter": "dead-letter queue"}

# A box that is more than one instance: "x3", "×N", "pool", "fleet", "replicas", a plural, "1..N".
MULTIPLE = re.compile(r"[x×*]\s?(\d+|n|k)\b|\b(\d+|n)\s?[x×]\b|\bpool|\bfleet|\bcluster|\breplica|\bfarm\b|"
                      r"\b\d+\s*(\.\.|-|to)\s*(\d+|n)\b|\b(several|many|multiple|n)\s+\w+s\b|\bautoscal|"
                      r"\b(schedulers|workers|executors|runners|agents|consumers|dispatchers|nodes|instances)\b",
                      re.IGNORECASE)
STANDBY = re.compile(r"standby|stand-by|failover|fail-over|follower|hot spare|passive|secondary|backup|\belect",
                     re.IGNORECASE)


def components_in(text: str) -> set[str]:
    return {name for name, regex in PATTERNS.items() if regex.search(text)}


def technologies_in(text: str) -> set[str]:
    return {name for name, regex in TECHNOLOGY_PATTERNS.items() if regex.search(text)}


def is_multiple(text: str) -> bool:
    return bool(MULTIPLE.search(text))


def has_standby(text: str) -> bool:
    return bool(STANDBY.search(text))
