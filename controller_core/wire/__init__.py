"""The Kafka wire protocol around the ClusterAdmin port: a sans-IO frame decoder and request
parser, the API handlers, SASL/PLAIN with a small ACL file, and an asyncio server.

Request and response classes come from kafka-python's protocol module; the two KIP-853 APIs
it lacks (AddRaftVoter, RemoveRaftVoter) are declared here from Kafka's own JSON schemas with
the same machinery. Nothing here knows Kubernetes.
"""
