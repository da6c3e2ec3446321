"""OpenAI's Responses API: /v1/responses, with stored conversations (previous_response_id)."""
