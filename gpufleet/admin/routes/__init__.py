"""The admin API's routes, one module per resource."""

# The version of the API's resource routes (probes, metrics and the dashboard sit outside it).
API_PREFIX = "/api/v1"
