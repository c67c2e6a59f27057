"""Response and request models of the admin API (`*Public`), separate from the CRD models.

Fields are snake_case in Python and camelCase on the wire, like the CRDs; every field carries
a description, which the OpenAPI document shows.
"""
