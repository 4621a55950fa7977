"""`python -m pricegen`: writes wg_mesh/tools/instance_prices.yaml, the bundled on-demand prices of the gateway
instance types in every commercial AWS and GCP region, from a price list (docs/contributing/prices.md).

Readers, one per format, each pure (text in, prices out) and tested on small fixtures in that format:
pricegen.aws (the AWS Price List bulk API's offer files), pricegen.gcp (the Cloud Billing Catalog API's
`services.skus.list` pages for Compute Engine), pricegen.skypilot (SkyPilot's catalogue CSV, a third party's copy of
both). pricegen.catalogue says which types and regions; pricegen.table writes the file.
"""
