"""The RBAC rules of the admin API: what its users need for each route, what it needs itself.

The API asks the API server (SubjectAccessReview) whether the caller may do what each route maps
to, so these rules are what a ClusterRole grants to let someone use every route; narrower roles
give narrower access (a Role listing trainingjobs in one namespace shows that namespace's jobs).
"""

from __future__ import annotations

from typing import Any, Final

# Every route: read the fleet, jobs and queues, what-if, node actions, the policy, /metrics.
USER_RULES: Final[list[dict[str, Any]]] = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "patch"]},
    {
        "apiGroups": ["gpufleet.io"],
        "resources": ["trainingjobs", "servingjobs"],
        "verbs": ["get", "list", "create"],
    },
    {"apiGroups": ["gpufleet.io"], "resources": ["gpuqueues"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"]},
    {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
]
# Reading only: the fleet, the jobs, the queues, the policy, /metrics.
READER_RULES: Final[list[dict[str, Any]]] = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
    {
        "apiGroups": ["gpufleet.io"],
        "resources": ["trainingjobs", "servingjobs"],
        "verbs": ["get", "list"],
    },
    {"apiGroups": ["gpufleet.io"], "resources": ["gpuqueues"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
    {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
]
