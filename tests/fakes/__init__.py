"""Scripted fakes of model provider APIs, served on 127.0.0.1."""
