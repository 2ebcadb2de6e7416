"""The researcher area: pages under /researcher/ to set up, watch and steer studies."""
