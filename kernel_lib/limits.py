"""Every bound."""
