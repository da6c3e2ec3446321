"""Scenarios: one feature's workload each (agents with tools, JSON extraction, language
programs, KV tiers, pinned documents, tenants, data-parallel and Ray routing)."""
