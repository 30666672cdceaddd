"""Pecan (ATC'24) input-pipeline experiments: pipelines, calibration, policies, cluster model, logs, costs."""
