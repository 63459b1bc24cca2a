"""A tiny shop: stock and carts."""
