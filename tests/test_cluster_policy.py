"""The cluster's IAM policies (cluster/iam/*.json): least privilege, and what Ray's AWS
autoscaler calls on the head (issue 16 item 3)."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

import pytest
import ray
import yaml

ROOT = Path(__file__).resolve().parents[1]
IAM = ROOT / "cluster" / "iam"
PLACEHOLDERS = {
    *("ACCOUNT_ID", "REGION", "BUCKET", "PREFIX", "CLUSTER", "SECURITY_GROUP", "AMI_ID"),
    *("DATA_BUCKET", "DATA_PREFIX"),
}
FILLED = {
    "ACCOUNT_ID": "123456789012",
    "REGION": "us-west-2",
    "BUCKET": "sweeps",
    "PREFIX": "team/me",
    "CLUSTER": "sweeper",
    "SECURITY_GROUP": "sg-0123456789abcdef0",
    "AMI_ID": "ami-0a2b85e15b7c0ac34",
    "DATA_BUCKET": "datasets",
    "DATA_PREFIX": "team/data",
}
# Every boto3 call in Ray's AWS node provider (what the head's autoscaler does), and its action.
BOTO_ACTIONS = {
    "instances.filter": "ec2:DescribeInstances",
    "Instance": "ec2:DescribeInstances",
    "wait_until_stopped": "ec2:DescribeInstances",
    "describe_instance_types": "ec2:DescribeInstanceTypes",
    "create_instances": "ec2:RunInstances",
    "create_tags": "ec2:CreateTags",
    "terminate_instances": "ec2:TerminateInstances",
    "terminate": "ec2:TerminateInstances",
    "stop_instances": "ec2:StopInstances",
    "stop": "ec2:StopInstances",
    "start_instances": "ec2:StartInstances",
    "describe_images": "ec2:DescribeImages",
}
# Calls cluster.yaml turns off: cache_stopped_nodes: false (terminate, never stop and restart)
# and no CloudWatch agent (describe_images only checks an AMI for it).
NOT_USED = {"ec2:StopInstances", "ec2:StartInstances", "ec2:DescribeImages"}


def policy(name: str, values: dict | None = None) -> dict:
    text = (IAM / f"{name}.json").read_text()
    for key, value in (values or {}).items():
        text = text.replace("${" + key + "}", value)
    return json.loads(text)


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def statements(name: str) -> list[dict]:
    return policy(name)["Statement"]


def grants(name: str | dict) -> list[tuple[str, str, dict]]:
    """(action, resource, condition) of every Allow statement of a policy file (or document)."""
    doc = policy(name) if isinstance(name, str) else name
    return [
        (action, resource, s.get("Condition", {}))
        for s in doc["Statement"]
        if s["Effect"] == "Allow"
        for action in as_list(s["Action"])
        for resource in as_list(s["Resource"])
    ]


def wildcard_grants(doc: dict) -> list[tuple[str, str]]:
    """Grants of too much: any action `*` or `service:*`, and on Resource `*` anything but the
    read-only EC2 Describe calls (which take no resource-level permissions), or all of S3."""
    return [
        (action, resource)
        for action, resource, _ in grants(doc)
        if action == "*"
        or action.endswith(":*")
        or (resource == "*" and not re.fullmatch(r"ec2:Describe\w+", action))
        or resource.startswith("arn:aws:s3:::*")
    ]


@pytest.mark.parametrize("name", ["head-policy", "trust-policy", "worker-policy"])
def test_policies_parse_and_fill_in(name):
    text = (IAM / f"{name}.json").read_text()
    assert set(re.findall(r"\$\{(\w+)\}", text)) <= PLACEHOLDERS
    doc = policy(name, FILLED)
    assert doc["Version"] == "2012-10-17"
    assert "${" not in json.dumps(doc)
    assert all(s["Effect"] in ("Allow", "Deny") and s.get("Sid") for s in doc["Statement"])


@pytest.mark.parametrize("name", ["head-policy", "worker-policy"])
def test_no_wildcard_grants(name):
    assert wildcard_grants(policy(name)) == []
    assert wildcard_grants(policy(name, FILLED)) == []


@pytest.mark.parametrize(
    ("action", "resource"),
    [
        ("*", "*"),
        ("s3:*", "*"),
        ("iam:*", "*"),
        ("ec2:*", "arn:aws:ec2:::instance/*"),
        ("ec2:RunInstances", "*"),
        ("iam:PassRole", "*"),
        ("s3:GetObject", "arn:aws:s3:::*"),
    ],
)
def test_the_wildcard_check_catches_broad_grants(action, resource):
    doc = policy("head-policy")
    doc["Statement"].append(
        {"Sid": "Broad", "Effect": "Allow", "Action": action, "Resource": resource}
    )
    assert wildcard_grants(doc) == [(action, resource)]


def test_s3_is_the_storage_prefix_only_and_the_same_for_head_and_worker():
    head = [
        s
        for s in statements("head-policy")
        if any(a.startswith("s3:") for a in as_list(s["Action"]))
    ]
    worker = statements("worker-policy")
    assert head == worker
    for action, resource, _ in grants("worker-policy"):
        assert action.startswith("s3:")
        if resource == "arn:aws:s3:::${DATA_BUCKET}/${DATA_PREFIX}/*":  # `sweeper data put`'s
            assert action == "s3:GetObject"  # read only: a node cannot change the data set
            continue
        assert resource in (
            "arn:aws:s3:::${BUCKET}",
            "arn:aws:s3:::${BUCKET}/${PREFIX}",
            "arn:aws:s3:::${BUCKET}/${PREFIX}/*",
        )
        if resource == "arn:aws:s3:::${BUCKET}":  # the bucket itself: find it and list it
            assert action in ("s3:ListBucket", "s3:GetBucketLocation")


def test_the_head_launches_tags_and_terminates_only_this_clusters_instances():
    for action, resource, condition in grants("head-policy"):
        if action in ("ec2:RunInstances", "ec2:CreateTags") and resource.endswith(":instance/*"):
            tag = condition["StringEquals"]
            assert (
                tag.get("aws:RequestTag/ray-cluster-name") == "${CLUSTER}"
                or tag.get("ec2:CreateAction") == "RunInstances"
                or tag.get("ec2:ResourceTag/ray-cluster-name") == "${CLUSTER}"
            )
        if action == "ec2:TerminateInstances":
            assert condition == {"StringEquals": {"ec2:ResourceTag/ray-cluster-name": "${CLUSTER}"}}
        if action == "ec2:RunInstances" and ":security-group/" in resource:
            assert resource.endswith(":security-group/${SECURITY_GROUP}")
    (passrole,) = [g for g in grants("head-policy") if g[0] == "iam:PassRole"]
    assert passrole[1] == "arn:aws:iam::${ACCOUNT_ID}:role/${CLUSTER}-ray-worker"
    assert passrole[2] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
    assert not [g for g in grants("worker-policy") if not g[0].startswith("s3:")]


def test_ray_tags_its_nodes_with_the_key_the_conditions_use():
    from ray.autoscaler.tags import TAG_RAY_CLUSTER_NAME

    assert TAG_RAY_CLUSTER_NAME == "ray-cluster-name"


def test_the_head_may_make_every_call_of_rays_aws_autoscaler():
    source = (
        Path(ray.__file__).parent / "autoscaler" / "_private" / "aws" / "node_provider.py"
    ).read_text()
    calls = set(re.findall(r"meta\.client\.(\w+)", source))
    calls |= set(
        re.findall(r"(?:ec2_fail_fast|self\.ec2|\bec2)\.(?!meta\b)(instances\.filter|\w+)", source)
    )
    calls |= set(re.findall(r"\bnode\.(\w+)\(", source))
    assert calls - set(BOTO_ACTIONS) == set(), "a boto3 call this test does not know: map it"
    needed = {BOTO_ACTIONS[c] for c in calls} - NOT_USED
    granted = {action for action, _, _ in grants("head-policy")}
    assert needed <= granted, needed - granted
    assert granted - needed <= {"iam:PassRole"} | {a for a in granted if a.startswith("s3:")}
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    assert config["provider"]["cache_stopped_nodes"] is False  # so Stop/Start are not needed
    assert "cloudwatch" not in config["provider"]


def test_trust_policy_lets_ec2_assume_the_roles():
    (statement,) = statements("trust-policy")
    assert statement["Principal"] == {"Service": "ec2.amazonaws.com"}
    assert statement["Action"] == "sts:AssumeRole"


def test_cluster_yaml_and_readme_use_these_roles():
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    name = config["cluster_name"]
    types = config["available_node_types"]
    head = types[config["head_node_type"]]["node_config"]
    workers = [t["node_config"] for k, t in types.items() if k != config["head_node_type"]]
    assert head["IamInstanceProfile"] == {"Name": f"{name}-ray-head"}
    assert all(w["IamInstanceProfile"] == {"Name": f"{name}-ray-worker"} for w in workers)
    readme = (ROOT / "docs" / "security.md").read_text()
    for file in ("head-policy.json", "worker-policy.json", "trust-policy.json"):
        assert f"cluster/iam/{file}" in readme
    assert f"{name}-ray-head" in readme and f"{name}-ray-worker" in readme


# ------------------------------------------------------------------ what a request may do
def _matches(pattern: str, value: str) -> bool:
    return fnmatch.fnmatchcase(value, pattern)


def _condition_holds(condition: dict, context: dict[str, str]) -> bool:
    """IAM's StringEquals / StringLike (any of the values; a key the request lacks: false)."""
    for operator, keys in condition.items():
        for key, wanted in keys.items():
            if key not in context:
                return False
            values = as_list(wanted)
            if operator == "StringEquals" and context[key] not in values:
                return False
            if operator == "StringLike" and not any(_matches(v, context[key]) for v in values):
                return False
            if operator not in ("StringEquals", "StringLike"):
                raise AssertionError(f"an operator this check does not know: {operator}")
    return True


def allowed(doc: dict, action: str, resource: str, context: dict[str, str]) -> bool:
    """Whether an Allow statement of `doc` grants `action` on `resource` in `context` (the
    policy has no Deny; unlisted is denied)."""
    return any(
        _matches(a, action) and _matches(r, resource) and _condition_holds(c, context)
        for a, r, c in grants(doc)
    )


def cluster_config() -> dict:
    return yaml.safe_load((ROOT / "cluster.yaml").read_text())


def worker_node_configs() -> list[dict]:
    config = cluster_config()
    types = config["available_node_types"]
    return [t["node_config"] for k, t in types.items() if k != config["head_node_type"]]


def test_the_head_launches_only_the_worker_types_and_image_of_cluster_yaml():
    doc = policy("head-policy", FILLED)
    workers = worker_node_configs()
    (ami,) = {w["ImageId"] for w in workers}
    assert ami == FILLED["AMI_ID"]
    instance = "arn:aws:ec2:us-west-2:123456789012:instance/i-0abc"
    tagged = {"aws:RequestTag/ray-cluster-name": "sweeper"}
    for node in workers:
        assert allowed(
            doc, "ec2:RunInstances", instance, {**tagged, "ec2:InstanceType": node["InstanceType"]}
        )
    for other in ("p4d.24xlarge", "m5.2xlarge", "x2iedn.32xlarge"):
        assert not allowed(doc, "ec2:RunInstances", instance, {**tagged, "ec2:InstanceType": other})
    assert not allowed(doc, "ec2:RunInstances", instance, {"ec2:InstanceType": "g4dn.12xlarge"})
    # the worker types' instance types, and nothing else, in the policy
    (types,) = [
        set(as_list(c["StringEquals"]["ec2:InstanceType"]))
        for a, r, c in grants("head-policy")
        if a == "ec2:RunInstances" and r.endswith(":instance/*")
    ]
    assert types == {w["InstanceType"] for w in workers}
    image = "arn:aws:ec2:us-west-2::image/{}"
    assert allowed(doc, "ec2:RunInstances", image.format(ami), {})
    assert not allowed(doc, "ec2:RunInstances", image.format("ami-0123456789abcdef0"), {})
    # the one AMI id: cluster.yaml's, the one docs/security.md exports for envsubst
    security = (ROOT / "docs" / "security.md").read_text()
    assert f"AMI_ID={ami}" in security and "$AMI_ID" in security


@pytest.mark.parametrize("name", ["head-policy", "worker-policy"])
def test_listing_the_bucket_is_limited_to_the_storage_prefix(name):
    doc = policy(name, FILLED)
    bucket = "arn:aws:s3:::sweeps"
    for prefix in ("team/me", "team/me/", "team/me/cifar10/trials/"):
        assert allowed(doc, "s3:ListBucket", bucket, {"s3:prefix": prefix}), prefix
    for prefix in ("", "team/", "team/other/", "other/team/me/"):
        assert not allowed(doc, "s3:ListBucket", bucket, {"s3:prefix": prefix}), prefix
    assert not allowed(doc, "s3:ListBucket", bucket, {})  # a listing of the whole bucket
    assert not allowed(doc, "s3:ListBucket", "arn:aws:s3:::another", {"s3:prefix": "team/me/"})
    assert allowed(doc, "s3:GetObject", "arn:aws:s3:::sweeps/team/me/cifar10/sweep.json", {})
    assert not allowed(doc, "s3:GetObject", "arn:aws:s3:::sweeps/team/other/sweep.json", {})


def test_the_request_check_is_not_vacuous():
    broad = {
        "Statement": [
            {
                "Sid": "A",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": "arn:aws:s3:::sweeps",
            }
        ]
    }
    assert allowed(broad, "s3:ListBucket", "arn:aws:s3:::sweeps", {"s3:prefix": "team/other/"})
    doc = policy("head-policy", FILLED)
    assert not allowed(
        doc, "ec2:StopInstances", "arn:aws:ec2:us-west-2:123456789012:instance/i-1", {}
    )
