"""Every request body and query string, declared once: validation and the OpenAPI document."""
