package rmqfilter.harness;

import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.namesrv.NamesrvConfig;
import org.apache.rocketmq.namesrv.NamesrvController;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

/**
 * A NameServer on 127.0.0.1:PORT with its files under HOME, started in the client's JVM
 * ({@link #start}, the client's {@code namesrv_start} command); shut down with the client.
 */
public final class Namesrv {
    private Namesrv() {
    }

    /** Initializes and starts a NameServer in this JVM. */
    static NamesrvController start(int port, String home) throws Exception {
        // As the NameServer's own start-up does: requests carry this version (brokers read it).
        System.setProperty(RemotingCommand.REMOTING_VERSION_KEY, Integer.toString(MQVersion.CURRENT_VERSION));
        NamesrvConfig config = new NamesrvConfig();
        config.setRocketmqHome(home);
        config.setKvConfigPath(home + "/kvConfig.json");
        config.setConfigStorePath(home + "/namesrv.properties");
        NettyServerConfig server = new NettyServerConfig();
        server.setBindAddress("127.0.0.1");
        server.setListenPort(port);
        NamesrvController controller = new NamesrvController(config, server, new NettyClientConfig());
        if (!controller.initialize()) {
            throw new IllegalStateException("NameServer failed to initialize");
        }
        controller.start();
        return controller;
    }
}
